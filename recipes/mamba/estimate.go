package mamba

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Breakdown is a training step's memory: weights, gradients, optimizer
// state and activations (the peak of one micro-batch's forward and
// backward above the rest).
type Breakdown struct {
	Weights, Grads, Optimizer, Activations int64
}

// Total is the step's peak.
func (b Breakdown) Total() int64 { return b.Weights + b.Grads + b.Optimizer + b.Activations }

// EstimatePreset is one configuration to estimate.
type EstimatePreset struct {
	Name          string
	Model         ModelConfig
	Batch, Seq    int
	Precision     string // as --mixed-precision takes it ("auto" for use_fp16)
	Checkpointing bool
	Offload       bool
}

func presetOf(name string, c TrainConfig) EstimatePreset {
	return EstimatePreset{Name: name, Model: c.Model, Batch: c.MicroBatch, Seq: c.SeqLen, Precision: c.Precision,
		Checkpointing: c.GradCheckpointing, Offload: c.CPUOffload}
}

// guidePresets are the guide's "Recommended Settings by GPU" rows (its
// custom 16 GB medium row is config_16gb_safe.json: the small model at
// 1 × 256) and the CPU preset.
func guidePresets() []EstimatePreset {
	var out []EstimatePreset
	for _, name := range []string{"cpu", "8gb", "12gb", "16gb", "24gb"} {
		v := VRAMPresets[name]
		prec := "no"
		if v.Mixed {
			prec = "auto"
		}
		out = append(out, EstimatePreset{Name: "--vram " + name, Model: ModelSizes[v.Model], Batch: v.MicroBatch, Seq: v.SeqLen,
			Precision: prec, Checkpointing: v.Checkpointing, Offload: v.CPUOffload})
	}
	return out
}

// EstimateConfig is `torchfit mamba estimate`.
type EstimateConfig struct {
	Presets []EstimatePreset
	// Measure runs a dry step of each preset that fits (MaxBytes) on the
	// device: its memory as the counting allocator sees it.
	Measure bool
	// MaxBytes skips measuring presets whose estimate exceeds it (0: the
	// host's available memory / 2 on the CPU).
	MaxBytes  int64
	Device    torch.Device
	Scan      string
	ScanChunk int
}

// EstimateRow is one preset's estimate and, when measured, what a dry
// step held.
type EstimateRow struct {
	EstimatePreset
	Params    int64
	Precision amp.Precision
	Formula   Breakdown
	Measured  *Breakdown // nil: not measured
	Note      string     // why not measured
}

// Error is the formula's relative error against the measurement.
func (r EstimateRow) Error() float64 {
	if r.Measured == nil {
		return 0
	}
	return float64(r.Formula.Total()-r.Measured.Total()) / float64(r.Measured.Total())
}

// Estimate computes each preset's formula and, with Measure, measures a
// dry step (memplan.DryRun: two micro-batches and an AdamW update, after a
// warm-up that creates the optimizer's state).
func Estimate(cfg EstimateConfig) ([]EstimateRow, error) {
	var rows []EstimateRow
	err := torch.Main().DoErr(func() error {
		return torch.TidyErr(func() error { return estimateAll(cfg, &rows) })
	})
	return rows, err
}

func estimateAll(cfg EstimateConfig, rows *[]EstimateRow) error {
	for _, p := range cfg.Presets {
		row, err := estimateOne(cfg, p)
		if err != nil {
			return err
		}
		*rows = append(*rows, row)
	}
	return nil
}

func estimateOne(cfg EstimateConfig, p EstimatePreset) (EstimateRow, error) {
	mc := p.Model.withDefaults()
	ch, err := amp.ParsePrecision(p.Precision, cfg.Device)
	if err != nil {
		return EstimateRow{}, err
	}
	scanName := cfg.Scan
	if scanName == "" {
		scanName = "fused"
	}
	chunk := cfg.ScanChunk
	if chunk <= 0 {
		chunk = scan.DefaultChunk
	}
	row := EstimateRow{EstimatePreset: p, Params: mc.Params(), Precision: ch.Precision}
	row.Formula = Formula(mc, p.Batch, p.Seq, ch.Precision, p.Checkpointing, scanName, chunk)
	if !cfg.Measure {
		return row, nil
	}
	limit := cfg.MaxBytes
	if limit == 0 {
		limit = availableBytes() / 2
	}
	if row.Formula.Total() > limit {
		row.Note = fmt.Sprintf("not measured: %s estimated > %s available here", torch.FormatBytes(row.Formula.Total()), torch.FormatBytes(limit))
		return row, nil
	}
	m, err := measure(cfg.Device, mc, p, ch.Precision, scanName, chunk)
	if err != nil {
		return row, err
	}
	row.Measured = &m
	return row, nil
}

// measure dry-runs a step: the model, AdamW, batches of random tokens.
func measure(dev torch.Device, mc ModelConfig, p EstimatePreset, prec amp.Precision, scanName string, chunk int) (Breakdown, error) {
	var b Breakdown
	torch.ManualSeed(1)
	m, err := NewLM(mc)
	if err != nil {
		return b, err
	}
	defer nn.Free(m)
	s, err := scan.Parse(scanName, chunk)
	if err != nil {
		return b, err
	}
	m.Scan, m.Checkpointing = s, p.Checkpointing
	if dev != torch.CPU {
		nn.To(m, dev, torch.Float32)
	}
	adam := nn.AdamConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	var opt nn.Optimizer
	if p.Offload {
		off, err := train.NewOffload(m.ParamGroups(0.1), func(g []nn.ParamGroup) nn.Optimizer { return nn.NewAdamWGroups(g, adam) }, train.OffloadOptions{})
		if err != nil {
			return b, err
		}
		defer off.Free()
		opt = off
	} else {
		a := nn.NewAdamWGroups(m.ParamGroups(0.1), adam)
		defer a.Free()
		opt = a
	}
	x := torch.Randint(0, VocabSize, []int64{int64(p.Batch), int64(p.Seq)}).ToDevice(dev).Keep()
	defer x.Free()
	y := torch.Randint(0, VocabSize, []int64{int64(p.Batch), int64(p.Seq)}).ToDevice(dev).Keep()
	defer y.Free()
	params := nn.Tensors(nn.Parameters(m))
	micro := func() error {
		// As the trainer: the loss under autocast, its backward after the
		// region (which frees the weight casts autocast cached).
		var loss *torch.Tensor
		run := func() { loss = m.Loss(x, y, 0) }
		if prec == amp.FP32 {
			run()
		} else {
			amp.Autocast(dev, prec.DType(), run)
		}
		loss.Backward()
		return nil
	}
	update := func() error {
		if _, err := nn.ClipGradNorm(params, 1, 2); err != nil {
			return err
		}
		opt.Step()
		opt.ZeroGrad()
		return nil
	}
	meas, err := memplan.DryRun{Device: dev, Model: m, Optimizers: []nn.Optimizer{opt}}.Run(2, micro, update)
	if err != nil {
		return b, err
	}
	b.Weights = nn.ParamBytes(m)
	b.Optimizer = meas.Held - b.Weights
	b.Grads = b.Weights // float32 gradients of every parameter, held from the first micro-batch on
	b.Activations = meas.Peak - b.Grads
	return b, nil
}

// availableBytes is the host's MemAvailable (Linux), or 8 GiB.
func availableBytes() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 8 << 30
}

// printEstimate writes the table.
func printEstimate(w io.Writer, rows []EstimateRow, measured bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "preset\tmodel\tparams\tbatch × seq\tprecision\tckpt\tweights\tgradients\toptimizer\tactivations\tformula total\t"
	if measured {
		head += "measured activations\tmeasured total\tformula / measured\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		f := r.Formula
		line := fmt.Sprintf("%s\t%d×%d\t%.1fM\t%d × %d\t%s\t%v\t%s\t%s\t%s\t%s\t%s\t", r.Name, r.Model.DModel, r.Model.NLayers,
			float64(r.Params)/1e6, r.Batch, r.Seq, r.Precision, r.Checkpointing, mb(f.Weights), mb(f.Grads), mb(f.Optimizer),
			mb(f.Activations), mb(f.Total()))
		if measured {
			if r.Measured != nil {
				line += fmt.Sprintf("%s\t%s\t%+.1f %%\t", mb(r.Measured.Activations), mb(r.Measured.Total()), 100*r.Error())
			} else {
				line += "-\t-\t" + r.Note + "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

// Params is the number of parameters (the tied head counted once).
func (c ModelConfig) Params() int64 {
	c = c.withDefaults()
	return c.PaddedVocab()*c.DModel + int64(c.NLayers)*c.layerParams() + c.DModel
}

// layerParams is the number of parameters of one block.
func (c ModelConfig) layerParams() int64 {
	d, e, r, n, k := c.DModel, c.DInner(), c.DtRank, c.DState, c.DConv
	return d*2*e + // in_proj
		e*k + e + // conv1d
		e*(r+2*n) + // x_proj
		r*e + e + // dt_proj
		e*n + e + // A_log, D
		e*d + // out_proj
		d // norm
}

// Formula is the memory of a training step from the model's shapes: what
// each op keeps for backward, counted tensor by tensor as this recipe's
// forward creates them (see the comments), plus the head's (HeadLoss)
// tensors at the step's peak. Weights are float32, gradients float32, AdamW two float32
// moments per parameter. Under autocast (bf16/fp16) matmul-like ops
// (linear, conv) output the low precision and keep low-precision copies of
// their inputs and of the weights (autocast's cache); norms, the residual
// stream, the scan and the loss stay float32.
func Formula(c ModelConfig, batch, seq int, p amp.Precision, checkpointing bool, scanName string, chunk int) Breakdown {
	c = c.withDefaults()
	P := c.Params()
	const f32 = 4
	lp := int64(f32) // bytes of a matmul's output
	if p != amp.FP32 {
		lp = 2
	}
	T := int64(batch) * int64(seq)
	B := int64(batch)
	d, e, r, n, v := c.DModel, c.DInner(), c.DtRank, c.DState, c.PaddedVocab()
	L := int64(c.NLayers)

	var bd Breakdown
	bd.Weights = P * f32
	bd.Grads = P * f32
	bd.Optimizer = 2 * P * f32

	// One block's saved tensors (bytes).
	block := int64(0)
	block += T * d * f32 // the residual stream entering the norm (kept by its square and product)
	block += T * f32     // the norm's rsqrt
	block += T * d * f32 // the normalised x (kept by the weight's product)
	if p != amp.FP32 {
		block += T * d * lp // in_proj's low-precision copy of its input
	}
	block += T * 2 * e * lp               // in_proj's output xz (x for the conv, z for the gate)
	block += (T + B*(c.DConv-1)) * e * lp // conv1d's output, padded (kept by silu)
	block += T * e * lp                   // silu(conv): the scan's x and x_proj's input
	block += T * (r + 2*n) * lp           // x_proj's output (Δ's low rank, B, C)
	block += T * r * lp                   // dt_proj's input made contiguous
	block += T * e * lp                   // dt_proj's output (kept by softplus)
	block += T * e * lp                   // Δ = softplus(…)
	block += scanSaved(T, B, e, n, int64(seq), p, scanName, int64(chunk))
	block += T * e * lp // y (kept by the gate's product)
	block += T * e * lp // silu(z) (kept by the gate's product)
	block += T * e * lp // y·silu(z), out_proj's input
	if c.Dropout > 0 {
		block += T * d * lp // dropout's mask
	}
	// The head (HeadLoss): the last stream, norm_f's normalised input and
	// output, the gradient with respect to the hidden states made in the
	// forward pass (gh), one chunk's logits (HeadChunkElems float32 values:
	// the logits of the sequence never exist whole), and three vocabulary ×
	// width float32 tensors: the head's weight gradient made in the forward
	// pass (gW), its product with the weight in the surrogate handed to
	// autograd, and the gradient autograd then makes from it before adding
	// it to the accumulated one. (Three is what the counting allocator
	// shows: 3.2 × v·d·4 bytes of the step's peak at widths 128 and 256,
	// TestFormulaMatchesMeasured.)
	head := T*d*f32*3 + T*f32 + T*d*f32 + headChunkElems*f32 + 3*v*d*f32
	var saved int64
	if checkpointing {
		// Each block keeps only its inputs (the mixer's output and the
		// residual stream); backward recomputes one block at a time, after
		// the head's tensors are gone: the peak is the larger of the two.
		recomputed := block
		if p != amp.FP32 {
			// The autocast cache: a checkpointed block's first run caches
			// nothing (torch.Recompute), so the forward holds the head's
			// (the tied embedding's) low-precision copy only; a
			// recomputed block, its own weights'.
			head += v * d * lp
			recomputed += c.layerParams() * lp
		}
		saved = L*2*T*d*f32 + max(head, recomputed)
	} else {
		if p != amp.FP32 {
			// The autocast cache: low-precision copies of every weight
			// used by a matmul (the whole model, the tied embedding through
			// the head).
			head += P * lp
		}
		saved = L*block + head
	}
	bd.Activations = saved
	return bd
}

// scanSaved is what the selective scan keeps for backward beyond its
// inputs' own tensors: float32 copies of x, B and C made contiguous (and of
// Δ under autocast), and the fused kernel's chunk-start states; the ATen
// formulations keep their per-step tensors.
func scanSaved(T, B, e, n, seq int64, p amp.Precision, name string, chunk int64) int64 {
	const f32 = 4
	s := T*e*f32 + 2*T*n*f32 // x, B, C contiguous float32
	if p != amp.FP32 {
		s += T * e * f32 // Δ in float32
	}
	switch name {
	case "fused":
		s += B * ((seq + chunk - 1) / chunk) * e * n * f32
	case "chunked":
		s += B * ((seq + chunk - 1) / chunk) * e * n * f32
	default: // sequential, parallel: exp(Δ·A), Δ·x·B and every state
		s += 3 * T * e * n * f32
	}
	return s
}
