package mamba

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

// Sampling settings out of range are the user's *recipes.ConfigError
// before a checkpoint is read (issue 24, item 11: a temperature of 1e-320
// overflowed the logits and failed in sampling, exit 1; a max-new-tokens
// of 1e11 sized a slice by it and died out of memory).
func TestGenerateConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   GenerateConfig
		field string // "": valid
	}{
		{"defaults", GenerateConfig{MaxNewTokens: 100, Temperature: 0.8, TopK: 40}, ""},
		{"greedy", GenerateConfig{Temperature: 0}, ""},
		{"lowest temperature", GenerateConfig{Temperature: MinTemperature}, ""},
		{"denormal temperature", GenerateConfig{Temperature: 1e-320}, "temperature"},
		{"tiny temperature", GenerateConfig{Temperature: 1e-30}, "temperature"},
		{"negative temperature", GenerateConfig{Temperature: -1}, "temperature"},
		{"NaN temperature", GenerateConfig{Temperature: math.NaN()}, "temperature"},
		{"negative max-new-tokens", GenerateConfig{MaxNewTokens: -1}, "max-new-tokens"},
		{"most max-new-tokens", GenerateConfig{MaxNewTokens: MaxNewTokens}, ""},
		{"too many max-new-tokens", GenerateConfig{MaxNewTokens: MaxNewTokens + 1}, "max-new-tokens"},
		{"absurd max-new-tokens", GenerateConfig{MaxNewTokens: 100_000_000_000}, "max-new-tokens"},
		{"negative top-k", GenerateConfig{TopK: -1}, "top-k"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *recipes.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, c.field, ce.Field)
			require.True(t, recipes.IsUserError(err))
		})
	}
}
