package mamba

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
)

// The model is released by nn.Free at once: its build leaves no
// temporary to the garbage collector, which would count in the next peak
// measured.
func TestModelBuildLeavesNoGarbage(t *testing.T) {
	var cases []freecheck.Case
	for _, name := range []string{"tiny", "small"} { // small: with dropout
		cases = append(cases, freecheck.Case{Name: name, Build: func() (nn.Module, error) { return NewLM(ModelSizes[name]) }})
	}
	freecheck.Run(t, cases)
}
