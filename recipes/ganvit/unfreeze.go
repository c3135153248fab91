package ganvit

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Schedule is the seed's progressive unfreezing, `{epoch: [layer
// indices]}` (e.g. {8: [11]}): with a schedule the ViT starts with its
// embeddings and every encoder block frozen (encoder.ln and the head
// train), and at the start of each listed epoch (counted from 0, as
// Python's `for epoch in range(EPOCHS)`) the listed encoder blocks become
// trainable. Without one (nil) everything trains from the start.
type Schedule map[int][]int

// ScheduleError is an unfreezing schedule that cannot be used (a command
// line exits 2).
type ScheduleError struct {
	Value string
	Err   error
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("--unfreeze %q: %v", e.Value, e.Err)
}
func (e *ScheduleError) Unwrap() error { return e.Err }

// UserError marks it as the user's.
func (*ScheduleError) UserError() {}

// ParseSchedule reads a schedule written as the seed writes it, {8: [11],
// 10: [9, 10]} (YAML's flow style), or as JSON ({"8": [11]}); a single
// index may stand without brackets ({8: 11}). "" and "{}" are no schedule.
func ParseSchedule(s string) (Schedule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw map[string]any
	// Python writes {8:[11]}; YAML's flow style wants a space after ':'.
	text := colon.ReplaceAllString(s, ": $1")
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, &ScheduleError{s, fmt.Errorf("want {epoch: [layer indices]}, e.g. {8: [11]}: %v", firstLine(err.Error()))}
	}
	if len(raw) == 0 {
		return nil, nil
	}
	out := Schedule{}
	for k, v := range raw {
		epoch, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || epoch < 0 {
			return nil, &ScheduleError{s, fmt.Errorf("epoch %q is not an integer >= 0", k)}
		}
		var items []any
		switch v := v.(type) {
		case []any:
			items = v
		default:
			items = []any{v}
		}
		if len(items) == 0 {
			return nil, &ScheduleError{s, fmt.Errorf("epoch %d lists no layers", epoch)}
		}
		for _, it := range items {
			var idx int
			switch x := it.(type) {
			case int:
				idx = x
			case float64:
				if x != math.Trunc(x) || math.Abs(x) > 1<<20 {
					return nil, &ScheduleError{s, fmt.Errorf("layer %v is not an integer", x)}
				}
				idx = int(x)
			default:
				return nil, &ScheduleError{s, fmt.Errorf("layer %v is not an integer", it)}
			}
			out[epoch] = append(out[epoch], idx)
		}
	}
	return out, nil
}

var colon = regexp.MustCompile(`:(\S)`)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Check refuses a schedule naming an encoder block the model does not
// have, or an epoch the run does not reach.
func (s Schedule) Check(layers, epochs int) error {
	for _, e := range s.Epochs() {
		if e >= epochs {
			return &ScheduleError{s.String(), fmt.Errorf("epoch %d is past the run's %d epochs (0 to %d)", e, epochs, epochs-1)}
		}
		for _, i := range s[e] {
			if i < 0 || i >= layers {
				return &ScheduleError{s.String(), fmt.Errorf("epoch %d names encoder layer %d; the ViT has %d (0 to %d)", e, i, layers, layers-1)}
			}
		}
	}
	return nil
}

// Epochs returns the schedule's epochs, sorted.
func (s Schedule) Epochs() []int {
	var out []int
	for e := range s {
		out = append(out, e)
	}
	sort.Ints(out)
	return out
}

// Until returns the layers unfrozen at or before epoch, sorted.
func (s Schedule) Until(epoch int) []int {
	seen := map[int]bool{}
	var out []int
	for e, ls := range s {
		if e > epoch {
			continue
		}
		for _, l := range ls {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	sort.Ints(out)
	return out
}

// String writes the schedule as the seed does: {8: [11], 10: [9, 10]}.
func (s Schedule) String() string {
	var parts []string
	for _, e := range s.Epochs() {
		ls := make([]string, len(s[e]))
		for i, l := range s[e] {
			ls[i] = strconv.Itoa(l)
		}
		parts = append(parts, fmt.Sprintf("%d: [%s]", e, strings.Join(ls, ", ")))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
