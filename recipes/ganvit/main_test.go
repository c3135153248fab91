package ganvit

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// testPreset is small enough for tests: 1 s clips (44 frames), 16 mels.
var testPreset = Preset{Name: "test", Mels: 16, Frames: 44, GANBatch: 4, MicroBatch: 4, NumSynthetic: 8, ViT: "tiny",
	Latent: 8, GenChannels: 64, DiscChannels: 8, Ups: 2}

var (
	dataOnce sync.Once
	dataDir  string
	dataErr  error
	tmpRoot  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// testData returns a data directory of 40 one-second clips (32 train, 4
// valid, 4 test), made once per test binary. Tests must not modify it.
func testData(t *testing.T) string {
	t.Helper()
	dataOnce.Do(func() {
		tmpRoot, dataErr = os.MkdirTemp("", "ganvit-test-")
		if dataErr != nil {
			return
		}
		dataDir = filepath.Join(tmpRoot, "data")
		_, dataErr = Generate(context.Background(), GenerateConfig{OutDir: dataDir, Clips: 40, Seconds: 1, Seed: 3})
	})
	require.NoError(t, dataErr)
	return dataDir
}

// copyData copies the test data set (to damage it).
func copyData(t *testing.T) string {
	t.Helper()
	src := testData(t)
	dst := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	return dst
}
