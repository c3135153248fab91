package tts

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
)

// The models are released by nn.Free at once: their builds leave no
// temporary to the garbage collector. The aligned position tables and
// the conditioning latents once did, and the memory test's first row
// counted them when no collection had run before it (CI read a peak
// 104,448 B higher than the next run's).
func TestModelBuildLeavesNoGarbage(t *testing.T) {
	gc := DefaultGPTConfig()
	gc.Vocab, gc.Codes = 60, DefaultCodecConfig().Codes
	plain := gc
	plain.AlignedPositions = false
	freecheck.Run(t, []freecheck.Case{
		{Name: "codec", Build: func() (nn.Module, error) { return NewCodec(DefaultCodecConfig()) }},
		{Name: "gpt", Build: func() (nn.Module, error) { return NewGPT(gc) }},
		{Name: "gpt without aligned positions", Build: func() (nn.Module, error) { return NewGPT(plain) }},
		{Name: "model", Build: func() (nn.Module, error) { return NewModel(DefaultCodecConfig(), gc) }},
	})
}
