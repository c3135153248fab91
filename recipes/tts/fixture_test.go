package tts

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// The tests share one tiny corpus (espeak-ng, 40 utterances, a second or
// two) and an untrained codec checkpoint over it.
var fixture struct {
	once  sync.Once
	dir   string
	codec string
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// tinyCodecConfig is a codec small enough for tests.
func tinyCodecConfig() CodecConfig {
	return CodecConfig{Channels: 16, CodeDim: 8, Codes: 32, Beta: 0.25, ResDepth: 1}
}

// tinyGPTConfig is a GPT small enough for tests.
func tinyGPTConfig(vocab int64) GPTConfig {
	g := DefaultGPTConfig()
	g.DecoderDim, g.TextEncoderDim, g.Layers, g.Heads, g.FF, g.CondLatents = 32, 16, 2, 2, 64, 4
	g.Vocab, g.Codes, g.MaxText, g.MaxCodes = vocab, 32, 100, 300
	return g
}

// tinyCorpus returns the shared corpus directory and codec checkpoint.
func tinyCorpus(t *testing.T) (dir, codec string) {
	t.Helper()
	fixture.once.Do(func() {
		fixture.dir, fixture.err = os.MkdirTemp("", "torchfit-tts-test-")
		if fixture.err != nil {
			return
		}
		_, fixture.err = Generate(context.Background(), DataConfig{OutDir: fixture.dir, Utterances: 40, Seed: 3, Workers: 2})
		if fixture.err != nil {
			return
		}
		fixture.codec = filepath.Join(fixture.dir, "codec.pt")
		fixture.err = saveCodec(fixture.dir, fixture.codec, tinyCodecConfig())
	})
	require.NoError(t, fixture.err)
	return fixture.dir, fixture.codec
}

// saveCodec writes an untrained codec checkpoint for the corpus in dir.
func saveCodec(dir, path string, cfg CodecConfig) error {
	store, err := OpenFeatures(dir, false)
	if err != nil {
		return err
	}
	defer store.Close()
	var serr error
	torch.Main().Do(func() {
		torch.ManualSeed(7)
		c, err := NewCodec(cfg)
		if err != nil {
			serr = err
			return
		}
		defer nn.Free(c)
		w := ckpt.NewWriter()
		w.Module("model", c)
		w.Meta(metaDict(modelMeta{Kind: "codec", Codec: cfg, Mean: store.Index.Mean, Std: store.Index.Std, Data: dir}))
		serr = w.Save(path)
	})
	return serr
}
