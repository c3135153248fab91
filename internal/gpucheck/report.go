package gpucheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Report is gpu-report.json.
type Report struct {
	Started time.Time `json:"started"`
	// Deadline is the run's time budget's end (zero: none).
	Deadline time.Time      `json:"deadline,omitzero"`
	Seconds  float64        `json:"seconds"`
	Machine  map[string]any `json:"machine"`
	Build    map[string]any `json:"build,omitempty"` // the build step, as make reports it
	Checks   []Result       `json:"checks"`
}

// Counts returns how many checks passed, failed and were skipped.
func (r Report) Counts() (pass, fail, skipped int) {
	for _, c := range r.Checks {
		switch c.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		default:
			skipped++
		}
	}
	return
}

// Write writes gpu-report.json and gpu-report.md into dir.
func (r Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "gpu-report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "gpu-report.md"), []byte(r.Markdown()), 0o644)
}

// Markdown renders the report.
func (r Report) Markdown() string {
	var b strings.Builder
	p, f, s := r.Counts()
	fmt.Fprintf(&b, "# torchfit GPU check\n\n%s, %.0f s: %d passed, %d failed, %d skipped.\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Seconds, p, f, s)
	if !r.Deadline.IsZero() {
		fmt.Fprintf(&b, "Time budget: to %s (GPUBUDGET); a check not started for it is skipped, and a check's items left out are named in its summary.\n\n",
			r.Deadline.UTC().Format("15:04:05 UTC"))
	}
	b.WriteString("## Machine\n\n")
	writeMap(&b, r.Machine)
	if len(r.Build) > 0 {
		b.WriteString("\n## Build\n\n")
		writeMap(&b, r.Build)
	}
	b.WriteString("\n## Checks\n\n| check | result | seconds | summary |\n|---|---|---:|---|\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s |\n", c.Name, c.Status, c.Seconds, cell(c.Summary))
	}
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "\n### %s: %s\n\n%s\n\nReproduce: `%s`\n", c.Name, c.Status, c.Summary, c.Cmd)
		if len(c.Figures) > 0 {
			b.WriteString("\n")
			writeMap(&b, c.Figures)
		}
		if c.Log != "" {
			fmt.Fprintf(&b, "\n```\n%s\n```\n", strings.TrimSpace(c.Log))
		}
	}
	return b.String()
}

func writeMap(b *strings.Builder, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case float64:
			s = trimFloat(x)
		default:
			j, _ := json.Marshal(x)
			s = string(j)
		}
		if strings.Contains(s, "\n") {
			fmt.Fprintf(b, "- %s:\n\n```\n%s\n```\n", k, strings.TrimSpace(s))
			continue
		}
		fmt.Fprintf(b, "- %s: %s\n", k, s)
	}
}

func trimFloat(x float64) string {
	if x == float64(int64(x)) && x < 1e15 && x > -1e15 {
		return fmt.Sprintf("%d", int64(x))
	}
	return fmt.Sprintf("%.4g", x)
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
