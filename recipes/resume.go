package recipes

import (
	"fmt"
	"math"
	"strings"

	"github.com/urfave/cli/v2"
)

// Stored is one model setting of the checkpoint a command resumes from:
// the flag that sets it and the checkpoint's value.
type Stored struct {
	Flag  string
	Value any
}

// Conflict is a model flag a resumed command gave that its checkpoint's
// model contradicts.
type Conflict struct {
	Flag          string
	Given, Stored any
	File          string // the --config file that gave it ("": the command line)
}

// ResumeConflictError is a resumed command whose model flags contradict
// the checkpoint's model. A resumed run trains the checkpoint's model, so
// the command line exits 2 rather than train another model than it says.
type ResumeConflictError struct {
	Path      string
	Conflicts []Conflict
}

func (e *ResumeConflictError) Error() string {
	parts := make([]string, len(e.Conflicts))
	for i, c := range e.Conflicts {
		from := "--" + c.Flag
		if c.File != "" {
			from = fmt.Sprintf("%s in %s", c.Flag, c.File)
		}
		parts[i] = fmt.Sprintf("%s %v (it has %v)", from, c.Given, c.Stored)
	}
	return fmt.Sprintf("--resume %s: the checkpoint's model is not the one asked for: %s; drop these settings to resume (the model comes from the checkpoint), or train a new model without --resume",
		e.Path, strings.Join(parts, ", "))
}

// UserError marks it as the user's.
func (*ResumeConflictError) UserError() {}

// CheckResumed compares the model settings a command resuming from path
// gave (each Stored flag set on its command line or by its --config file,
// fromFile) with the checkpoint's values, and returns a
// *ResumeConflictError naming every one that differs. Flags the command
// left alone are the checkpoint's.
func CheckResumed(c *cli.Context, fromFile map[string]string, path string, stored ...Stored) error {
	var bad []Conflict
	for _, s := range stored {
		if !c.IsSet(s.Flag) {
			continue
		}
		given := c.Value(s.Flag)
		if same(given, s.Value) {
			continue
		}
		bad = append(bad, Conflict{Flag: s.Flag, Given: given, Stored: s.Value, File: fromFile[s.Flag]})
	}
	if len(bad) == 0 {
		return nil
	}
	return &ResumeConflictError{Path: path, Conflicts: bad}
}

// same compares a flag's value with a stored one: names without regard to
// case, numbers by value whatever their Go type.
func same(given, stored any) bool {
	if g, ok := given.(string); ok {
		s, ok := stored.(string)
		return ok && strings.EqualFold(g, s)
	}
	g, gok := numeric(given)
	s, sok := numeric(stored)
	if gok && sok {
		return g == s || math.Abs(g-s) <= 1e-9*math.Max(math.Abs(g), math.Abs(s))
	}
	return fmt.Sprint(given) == fmt.Sprint(stored)
}

func numeric(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	return 0, false
}
