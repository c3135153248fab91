package speech

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// TestGenerateSpeed measures full-size generation when ASR_GEN_N is set:
// ASR_GEN_N=2000 ASR_GEN_DIR=/tmp/asr go test ./recipes/speech -run GenerateSpeed -v
func TestGenerateSpeed(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ASR_GEN_N"))
	if n == 0 {
		t.Skip("set ASR_GEN_N (and ASR_GEN_DIR) to measure generation speed")
	}
	dir := os.Getenv("ASR_GEN_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := DefaultGenerateConfig()
	cfg.OutDir, cfg.Utterances = dir, n
	st, err := Generate(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d utterances (%d synthesised, %d skipped), %.1f min audio, %v, counts %v, workers %d",
		n, st.Synthesised, st.Skipped, st.Seconds/60, st.Elapsed, st.Counts, st.Workers)
}
