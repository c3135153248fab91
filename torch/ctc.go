package torch

import (
	"fmt"
	"math"
)

var (
	opCtcLossRaw   = defOp("aten::_ctc_loss", "Tensor")
	opCudnnCtcLoss = defOp("aten::_cudnn_ctc_loss", "Tensor")
)

// CTCLossOnDevice is CTCLoss(logProbs, targets, inputLengths,
// targetLengths, 0, ReduceMean, true) — blank 0, each sequence's loss
// divided by its target length and then averaged, impossible alignments
// counted as 0 — in a form a CUDA graph can capture: nothing is read from
// the device and nothing copied to it. CTCLoss on CUDA copies the lengths
// to the host, and its kernel copies them back, both of which wait for the
// device.
//
// logProbs (T, N, C) are log-probabilities, targets (N, S) integer ids
// padded past each target length, inputLengths and targetLengths (N)
// integer tensors on logProbs' device. On CUDA the targets are packed on
// the device into CTC's concatenated form and go, with the lengths as
// int32, to cuDNN's CTC, which takes its lengths on the device
// (aten::_cudnn_ctc_loss.Tensor, the deterministic algorithm: what
// F.ctc_loss picks for concatenated int32 targets and int32 lengths), in
// float32. cuDNN's limits are the caller's to check on the host
// (CTCOnDeviceFits): a check on the device would have to be read.
// Elsewhere (where nothing waits for a device) it is libtorch's own CTC,
// aten::_ctc_loss.Tensor, in logProbs' precision (float32 for a half
// type), with the same zeroing and reduction.
func CTCLossOnDevice(logProbs, targets, inputLengths, targetLengths *Tensor) *Tensor {
	return TidyTensor(func() *Tensor {
		if logProbs.Dim() != 3 || targets.Dim() != 2 || targets.Size(0) != logProbs.Size(1) {
			throwf("CTCLossOnDevice", "log-probabilities %v and targets %v: want (T, N, C) and (N, S)", logProbs.Shape(), targets.Shape())
		}
		dev := logProbs.Device()
		tg := targets.ToDevice(dev)
		tl := targetLengths.ToDevice(dev)
		il := inputLengths.ToDevice(dev)
		var costs *Tensor
		if dev.IsCUDA() {
			costs = cudnnCTC(logProbs.ToDType(Float32).Contiguous(), packTargets(tg, tl), il.ToDType(Int32), tl.ToDType(Int32))
		} else {
			lp := logProbs
			if dt := lp.DType(); dt != Float32 && dt != Float64 {
				lp = lp.ToDType(Float32)
			}
			var c call
			costs = c.t(lp).t(tg).t(il).t(tl).i(0).b(true).outN(opCtcLossRaw, 2)[0]
		}
		costs = costs.MaskedFill(costs.EqScalar(math.Inf(1)), 0)
		return costs.Div(tl.ClampMin(1)).Mean()
	})
}

// cudnnCTC is cuDNN's CTC with its lengths on the device: each sequence's
// cost (N) from log-probabilities lp (T, N, C, float32, contiguous),
// concatenated int32 targets and int32 lengths, blank 0, the
// deterministic algorithm, impossible targets zeroed in the backward.
func cudnnCTC(lp, packed, inputLengths, targetLengths *Tensor) *Tensor {
	var c call
	return c.t(lp).t(packed).t(inputLengths).t(targetLengths).i(0).b(true).b(true).outN(opCudnnCtcLoss, 2)[0]
}

// CTCOnDeviceFits says whether CTCLossOnDevice takes sequences of these
// lengths on CUDA: cuDNN's CTC needs each target at most 255 long and no
// longer than its input, and PyTorch asserts inputs shorter than 256
// frames when it captures that path (_use_cudnn_ctc_loss). nil when they
// fit.
func CTCOnDeviceFits(inputLengths, targetLengths []int64) error {
	if len(inputLengths) != len(targetLengths) {
		return fmt.Errorf("torch: %d input lengths for %d targets", len(inputLengths), len(targetLengths))
	}
	for b, in := range inputLengths {
		switch tl := targetLengths[b]; {
		case in >= 256:
			return fmt.Errorf("torch: sequence %d has %d frames; cuDNN's CTC on the device takes fewer than 256", b, in)
		case tl > 255:
			return fmt.Errorf("torch: target %d has %d labels; cuDNN's CTC takes at most 255", b, tl)
		case tl > in:
			return fmt.Errorf("torch: target %d has %d labels for %d frames; cuDNN's CTC needs no more labels than frames", b, tl, in)
		}
	}
	return nil
}

// packTargets packs targets (N, S), padded past each length in lengths
// (N, int64, on the targets' device), into CTC's concatenated form on the
// device: (N·S) int32, sequence b's ids after those of the sequences
// before it, zeros after the last. The total is not known on the host, so
// the size stays N·S; cuDNN reads only as far as the lengths say.
func packTargets(targets, lengths *Tensor) *Tensor {
	return TidyTensor(func() *Tensor {
		n, s := targets.Size(0), targets.Size(1)
		dev := targets.Device()
		tl := lengths.ToDType(Int64)
		// Sequence b's ids go to offset[b] + j for j < tl[b]; padding to
		// slot n·s, which is cut off.
		j := Arange(0, float64(s), 1, Int64, dev).Unsqueeze(0)
		pos := tl.Cumsum(0).Sub(tl).Unsqueeze(1).Add(j)
		pos = pos.MaskedFill(j.Ge(tl.Unsqueeze(1)), float64(n*s))
		packed := Zeros([]int64{n*s + 1}, Int64, dev).Scatter(0, pos.Reshape(-1), targets.ToDType(Int64).Reshape(-1))
		return packed.Narrow(0, 0, n*s).ToDType(Int32)
	})
}
