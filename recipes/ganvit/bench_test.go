package ganvit

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// benchEnabled gates the measurements of recipes/ganvit/README.md (minutes of CPU):
// TORCHFIT_BENCH_GANVIT=1 go test ./recipes/ganvit -run Bench -v -timeout 60m
// (make bench-ganvit). TORCHFIT_BENCH_GANVIT=cpu leaves out the GPU
// presets' sizes.
func benchEnabled(t *testing.T) string {
	v := os.Getenv("TORCHFIT_BENCH_GANVIT")
	if v == "" {
		t.Skip("set TORCHFIT_BENCH_GANVIT=1 (make bench-ganvit)")
	}
	return v
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// GAN iteration (discriminator and generator steps) at the cpu preset's
// and the GPU presets' sizes, fp32 against mixed precision (bf16 here:
// this CPU computes it natively; fp16 + GradScaler on CUDA): median time
// of the timed iterations after warm-up ones, and the peak above what is
// held between iterations.
func TestBenchGAN(t *testing.T) {
	mode := benchEnabled(t)
	dev := torch.CPU
	presets := []Preset{Presets["cpu"], Presets["gpu"]}
	if mode == "cpu" {
		presets = presets[:1]
	}
	var rows []string
	for _, p := range presets {
		mixed := amp.BF16 // the CPU's; fp16 + GradScaler on CUDA
		if dev.IsCUDA() {
			mixed = amp.FP16
		}
		for _, prec := range []amp.Precision{amp.FP32, mixed} {
			warm, timed := 2, 5
			if p.Name != "cpu" {
				warm, timed = 1, 2
			}
			torch.CollectGarbage()
			torch.ManualSeed(1)
			gc := p.GANConfig(len(Genres))
			g, d := NewGenerator(gc), NewDiscriminator(gc)
			gan, err := NewGAN(g, d, GANOptions{Device: dev, Precision: prec, MicroD: p.GANBatch, MicroG: p.GANBatch, NoOOMAdapt: true})
			require.NoError(t, err)
			b, err := dummyBatch(p.GANBatch, p)
			require.NoError(t, err)
			var times []time.Duration
			var peak, held int64
			for i := 0; i < warm+timed; i++ {
				if i == warm {
					held = torch.MustMemoryStats(dev).Allocated
					torch.ResetPeakMemory(dev)
				}
				r, err := gan.Step(b)
				require.NoError(t, err)
				if i >= warm {
					times = append(times, r.Duration)
				}
			}
			peak = torch.MustMemoryStats(dev).PeakAllocated - held
			rows = append(rows, fmt.Sprintf("| %s | %d × 1 × %d × %d | %s | %s | %s | %s |", p.Name, p.GANBatch, p.Mels, p.Frames, prec,
				median(times).Round(time.Millisecond), torch.FormatBytes(peak), torch.FormatBytes(held)))
			b.Free()
			gan.Free()
			nn.Free(g)
			nn.Free(d)
		}
	}
	t.Logf("GAN iteration (D + G steps, Adam), %s, %d threads:\n| preset | batch | precision | time / iteration | peak above held | held (weights + Adam) |\n|---|---|---|---:|---:|---:|\n%s",
		dev, torch.NumThreads(), strings.Join(rows, "\n"))
}

// ViT step (forward, backward, AdamW) on BATCH_SIZE spectrograms: peak
// above what is held, with and without checkpointing, and under the seed's
// unfreezing schedule before its epoch (backbone frozen: encoder.ln and
// the head train) and after it (the last block unfrozen too); the
// optimizer state each holds.
func TestBenchViT(t *testing.T) {
	mode := benchEnabled(t)
	dev := torch.CPU
	type cfgRow struct {
		p   Preset
		vit string
	}
	cases := []cfgRow{{Presets["cpu"], "cpu"}, {Presets["gpu"], "b16"}}
	if mode == "cpu" {
		cases = cases[:1]
	}
	var rows []string
	for _, c := range cases {
		vc := ViTConfigs[c.vit]
		vc.Classes = int64(len(Genres))
		last := vc.Layers - 1
		for _, v := range []struct {
			name     string
			ckpt     bool
			unfrozen []int // nil: everything trains
			frozen   bool
		}{
			{"all layers train", false, nil, false},
			{"all layers train, checkpointing", true, nil, false},
			{fmt.Sprintf("{8: [%d]} before epoch 8: backbone frozen", last), false, []int{}, true},
			{fmt.Sprintf("{8: [%d]} from epoch 8: layer %d unfrozen", last, last), false, []int{last}, true},
			{fmt.Sprintf("{8: [%d]} from epoch 8, checkpointing", last), true, []int{last}, true},
		} {
			torch.CollectGarbage()
			torch.ManualSeed(1)
			m, err := NewViT(vc)
			require.NoError(t, err)
			m.Checkpointing = v.ckpt
			if v.frozen {
				m.FreezeBackbone()
				require.NoError(t, m.UnfreezeLayers(v.unfrozen))
			}
			cls, err := NewClassifier(m, ClassifierOptions{Device: dev, Precision: amp.FP32, MicroBatch: c.p.MicroBatch, NoOOMAdapt: true})
			require.NoError(t, err)
			b, err := dummyBatch(c.p.MicroBatch, c.p)
			require.NoError(t, err)
			var times []time.Duration
			var held int64
			steps := 3
			if c.vit == "b16" {
				steps = 2
			}
			for i := 0; i < steps; i++ {
				if i == 1 { // the first step made the optimizer state
					held = torch.MustMemoryStats(dev).Allocated
					torch.ResetPeakMemory(dev)
				}
				info, err := cls.Step(b)
				require.NoError(t, err)
				if i >= 1 {
					times = append(times, info.Duration)
				}
			}
			peak := torch.MustMemoryStats(dev).PeakAllocated - held
			var grads int64
			for _, p := range nn.Parameters(m) {
				if p.T.RequiresGrad() {
					grads += p.T.NBytes()
				}
			}
			rows = append(rows, fmt.Sprintf("| %s (%s, %d × 3 × %d²) | %s | %s | %s | %s | %s |", vc.Name, count(nn.NumParams(m)), c.p.MicroBatch, vc.Image, v.name,
				torch.FormatBytes(peak), torch.FormatBytes(grads), torch.FormatBytes(stateBytes(cls.Opt)), median(times).Round(time.Millisecond)))
			b.Free()
			cls.Free()
			nn.Free(m)
		}
	}
	t.Logf("ViT step (fp32, AdamW), %s, %d threads:\n| ViT | configuration | peak above held | gradients (trainable bytes) | optimizer state | time / step |\n|---|---|---:|---:|---:|---:|\n%s",
		dev, torch.NumThreads(), strings.Join(rows, "\n"))
}
