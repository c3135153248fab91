package ganvit

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
)

// The cpu preset's networks are released by nn.Free at once: their
// builds leave no temporary to the garbage collector, which would count
// in the next peak measured (the memory breakdown's rows).
func TestModelBuildLeavesNoGarbage(t *testing.T) {
	p := Presets["cpu"]
	freecheck.Run(t, []freecheck.Case{
		{Name: "generator", Build: func() (nn.Module, error) { return NewGenerator(p.GANConfig(10)), nil }},
		{Name: "discriminator", Build: func() (nn.Module, error) { return NewDiscriminator(p.GANConfig(10)), nil }},
		{Name: "vit", Build: func() (nn.Module, error) {
			c, err := p.ViTConfig(10)
			if err != nil {
				return nil, err
			}
			return NewViT(c)
		}},
	})
}
