package asr

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// sox runs sox, failing the test on error.
func sox(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("sox"); err != nil {
		t.Skip("sox missing: run 'make deps'")
	}
	out, err := exec.Command("sox", append([]string{"-D", "-V1"}, args...)...).CombinedOutput()
	require.NoError(t, err, "sox %s: %s", strings.Join(args, " "), out)
}

// fakeBest stands in for the model: samples carry their own global index
// (x[i] = i), and frame j of a window gets token(g) for its global frame
// g = (start + (4j+3)·hop − 3·hop)/(4·hop), the frame the whole file's
// encoder would have there.
func fakeBest(hop int, token func(g int) int64) func([]float32) ([]int64, error) {
	return func(x []float32) ([]int64, error) {
		start := int(x[0])
		n := int(SubsampledLength(int64(1 + len(x)/hop)))
		out := make([]int64, n)
		for j := range out {
			out[j] = token(start/(4*hop) + j)
		}
		return out, nil
	}
}

// TestTranscribeWindowsJoin: the windows' kept frames tile the file's
// frame grid exactly (no frame twice, none missing), and runs of a token
// across a seam are merged: the windowed result equals decoding the whole
// file at once.
func TestTranscribeWindowsJoin(t *testing.T) {
	const hop = 160
	for _, tc := range []struct {
		name  string
		total int
		token func(g int) int64
	}{
		// A different token every frame: a duplicated or lost frame changes the result.
		{"every frame differs", 4*transcribeWindow + 12345, func(g int) int64 { return 5 + int64(g%7) }},
		// Runs of 100 frames (4 s), blanks between some: runs cross the seams.
		{"runs across seams", 3*transcribeWindow + 7, func(g int) int64 {
			if g/100%4 == 3 {
				return BlankID
			}
			return 5 + int64(g/100%3)
		}},
		{"one window", transcribeWindow, func(g int) int64 { return 5 + int64(g%3) }},
		{"just over one window", transcribeWindow + 1, func(g int) int64 { return 5 + int64(g%3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := 0
			read := func(dst []float32) (int, error) {
				for i := range dst {
					dst[i] = float32(next + i)
				}
				next += len(dst)
				return len(dst), nil
			}
			best := fakeBest(hop, tc.token)
			calls := 0
			counted := func(x []float32) ([]int64, error) { calls++; return best(x) }
			got, err := transcribeWindows(read, tc.total, transcribeWindow, transcribeOverlap, hop, counted)
			require.NoError(t, err)
			require.Equal(t, tc.total, next, "every sample read once")
			whole := make([]float32, tc.total)
			for i := range whole {
				whole[i] = float32(i)
			}
			path, _ := best(whole)
			require.Equal(t, cTCCollapse(path, BlankID), got)
			wantCalls := 1
			if tc.total > transcribeWindow {
				step := transcribeWindow - transcribeOverlap
				wantCalls = (tc.total - transcribeOverlap + step - 1) / step
			}
			require.Equal(t, wantCalls, calls, "windows")
		})
	}
}

func TestTranscribeWindowSizes(t *testing.T) {
	win, ov, ok := windows(5000, 160)
	require.True(t, ok)
	require.Equal(t, transcribeWindow, win)
	require.Equal(t, transcribeOverlap, ov)
	require.EqualValues(t, 749, SubsampledLength(int64(1+win/160)), "30 s is 749 encoder frames, far below MaxLen 5000")
	win, ov, ok = windows(200, 160) // a model with short positional tables
	require.True(t, ok)
	require.LessOrEqual(t, SubsampledLength(int64(1+win/160)), int64(180))
	require.Zero(t, win%640)
	require.Zero(t, ov%640)
	_, _, ok = windows(5, 160)
	require.False(t, ok)
}

// tinyASR is a small randomly initialised model with a vocabulary.
func tinyASR(t *testing.T) *Conformer {
	t.Helper()
	m := newTestModel(t, "tiny", func(c *ModelConfig) { c.DModel, c.EncoderLayers, c.DecoderLayers = 64, 2, 1 })
	toks := []string{"<blank>", "<pad>", "<sos>", "<eos>", "<unk>", " "}
	for r := 'क'; len(toks) < testVocab; r++ {
		toks = append(toks, string(r))
	}
	v, err := NewVocab(toks)
	require.NoError(t, err)
	m.Vocab = v
	nn.SetTraining(m, false)
	return m
}

// TestTranscribeShortFileUnchanged: a file of one window is transcribed
// exactly as the whole-file path (features of the whole file) does.
func TestTranscribeShortFileUnchanged(t *testing.T) {
	m := tinyASR(t)
	defer nn.Free(m)
	feat, err := NewFeaturizer(16000, 400, 160, 80)
	require.NoError(t, err)
	defer feat.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.wav")
	sox(t, "-n", "-r", "16000", "-c", "1", "-b", "16", path, "synth", "3", "pinknoise", "vol", "0.3")
	got, err := TranscribeWAV(m, feat, path, torch.CPU)
	require.NoError(t, err)
	var want string
	require.NoError(t, torch.TidyErr(func() error {
		x, err := feat.FeaturesFile(path)
		if err != nil {
			return err
		}
		want = m.Transcribe(x.Unsqueeze(0), nil)[0]
		return nil
	}))
	require.NotEmpty(t, want, "a random model emits tokens")
	require.Equal(t, want, got)

	short := filepath.Join(dir, "short.wav")
	sox(t, "-n", "-r", "16000", "-c", "1", "-b", "16", short, "synth", "0.03", "sine", "440")
	_, err = TranscribeWAV(m, feat, short, torch.CPU)
	var ae *audio.Error
	require.ErrorAs(t, err, &ae)
	require.ErrorContains(t, err, "0.030 s of audio is too short to transcribe (at least 0.060 s)")
}

// TestTranscribeLongAudioBoundedMemory: the tensor memory peak (torchfit's
// counting allocator) of transcribing a 4-minute file equals that of a
// 1-minute file: windows, not the whole file.
func TestTranscribeLongAudioBoundedMemory(t *testing.T) {
	m := tinyASR(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.pt")
	require.NoError(t, SaveModel(ckpt, m, "tiny"))
	nn.Free(m)
	peak := func(minutes int) int64 {
		path := filepath.Join(dir, fmt.Sprintf("%dmin.wav", minutes))
		sox(t, "-n", "-r", "16000", "-c", "1", "-b", "16", path, "synth", fmt.Sprint(60*minutes), "pinknoise", "vol", "0.3")
		torch.CollectGarbage() // garbage of earlier tests, released mid-run, would lower the peak
		base := torch.MustMemoryStats(torch.CPU).Allocated
		require.NoError(t, torch.ResetPeakMemory(torch.CPU))
		texts, err := TranscribeFiles(ckpt, []string{path}, torch.CPU)
		require.NoError(t, err)
		require.NotEmpty(t, texts[0])
		p := torch.MustMemoryStats(torch.CPU).PeakAllocated - base
		t.Logf("%d min: peak tensor memory %s above %s allocated before", minutes, torch.FormatBytes(p), torch.FormatBytes(base))
		return p
	}
	p1, p4 := peak(1), peak(4)
	require.InEpsilon(t, float64(p1), float64(p4), 0.02, "peak for 4 min %d vs 1 min %d", p4, p1)
}

// TestTranscribeFromTrainingCheckpoint: a training checkpoint (the
// weights, AdamW's two moments beside them, the loop's parts) transcribes
// at the peak of a file of the weights alone, to the byte: the optimizer's
// state is never read (ckpt.ReadParts).
func TestTranscribeFromTrainingCheckpoint(t *testing.T) {
	m := tinyASR(t)
	defer nn.Free(m)
	dir := t.TempDir()
	weights := filepath.Join(dir, "weights.pt")
	require.NoError(t, SaveModel(weights, m, "tiny"))
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	for _, p := range nn.Parameters(m) {
		p.T.SetGrad(torch.ZerosLike(p.T))
	}
	opt.Step()
	w := ckpt.NewWriter()
	w.Module("model", m)
	w.Optimizer("optimizer", opt)
	w.Int("step", 1)
	w.RNG()
	w.Meta(metaDict("tiny", m.Cfg, m.Vocab))
	training := filepath.Join(dir, "checkpoint_step_000001.pt")
	require.NoError(t, w.Save(training))

	wav := filepath.Join(dir, "pink.wav")
	sox(t, "-n", "-r", "16000", "-c", "1", "-b", "16", wav, "synth", "5", "pinknoise", "vol", "0.3")
	run := func(path string) (string, int64) {
		torch.CollectGarbage()
		base := torch.MustMemoryStats(torch.CPU).Allocated
		require.NoError(t, torch.ResetPeakMemory(torch.CPU))
		texts, err := TranscribeFiles(path, []string{wav}, torch.CPU)
		require.NoError(t, err)
		return texts[0], torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	}
	text, peak := run(weights)
	text2, peak2 := run(training)
	require.Equal(t, text, text2)
	require.Equal(t, peak, peak2, "the training checkpoint's peak above the weights file's")
}
