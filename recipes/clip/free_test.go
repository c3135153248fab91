package clip

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
)

// The model is released by nn.Free at once: its build leaves no
// temporary to the garbage collector, which would count in the next peak
// measured. The vision tower's three scaled random parameters once did.
func TestModelBuildLeavesNoGarbage(t *testing.T) {
	freecheck.Run(t, []freecheck.Case{{Name: "cpu", Build: func() (nn.Module, error) {
		c, err := Preset("cpu")
		if err != nil {
			return nil, err
		}
		return NewModel(c)
	}}})
}
