package asr

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
)

// Each preset's model is released by nn.Free at once: its build leaves
// no temporary to the garbage collector, which would count in the next
// peak measured (the memory table's rows).
func TestModelBuildLeavesNoGarbage(t *testing.T) {
	var cases []freecheck.Case
	for _, p := range Presets {
		cases = append(cases, freecheck.Case{Name: p, Build: func() (nn.Module, error) {
			c, err := Preset(p, 100)
			if err != nil {
				return nil, err
			}
			return NewConformer(c)
		}})
	}
	freecheck.Run(t, cases)
}
