package nn

import (
	"math"

	"github.com/torchfit/torchfit/torch"
)

// Losses as in torch.nn: constructors set PyTorch's defaults (mean
// reduction, ignore index −100, ...); change the exported fields to
// configure them. They are thin over torch's functional losses.

// CrossEntropyLoss is nn.CrossEntropyLoss on logits (N, C[, d...]) and
// int64 class targets (N[, d...]).
type CrossEntropyLoss struct {
	Weight         *torch.Tensor // per-class weights (C), or nil
	IgnoreIndex    int64         // targets equal to it contribute nothing (default −100)
	LabelSmoothing float64
	Reduction      torch.Reduction
}

// NewCrossEntropyLoss returns the loss with PyTorch's defaults.
func NewCrossEntropyLoss() *CrossEntropyLoss {
	return &CrossEntropyLoss{IgnoreIndex: -100, Reduction: torch.ReduceMean}
}

// Forward computes the loss.
func (l *CrossEntropyLoss) Forward(logits, target *torch.Tensor) *torch.Tensor {
	return torch.CrossEntropy(logits, target, l.Weight, l.Reduction, l.IgnoreIndex, l.LabelSmoothing)
}

// NLLLoss is nn.NLLLoss on log-probabilities.
type NLLLoss struct {
	Weight      *torch.Tensor
	IgnoreIndex int64
	Reduction   torch.Reduction
}

// NewNLLLoss returns the loss with PyTorch's defaults.
func NewNLLLoss() *NLLLoss { return &NLLLoss{IgnoreIndex: -100, Reduction: torch.ReduceMean} }

// Forward computes the loss.
func (l *NLLLoss) Forward(logProbs, target *torch.Tensor) *torch.Tensor {
	return torch.NLLLoss(logProbs, target, l.Weight, l.Reduction, l.IgnoreIndex)
}

// CTCLoss is nn.CTCLoss on log-probabilities (T, N, C). With mean
// reduction each sequence's loss is divided by its target length, then
// averaged over the batch, as in PyTorch.
type CTCLoss struct {
	Blank        int64
	Reduction    torch.Reduction
	ZeroInfinity bool // replace infinite losses (impossible alignments) and their gradients by zero
}

// NewCTCLoss returns the loss with PyTorch's defaults (blank 0, mean).
func NewCTCLoss() *CTCLoss { return &CTCLoss{Reduction: torch.ReduceMean} }

// Forward computes the loss; targets are (N, S) padded or concatenated,
// the lengths int64 (N).
func (l *CTCLoss) Forward(logProbs, targets, inputLengths, targetLengths *torch.Tensor) *torch.Tensor {
	return torch.CTCLoss(logProbs, targets, inputLengths, targetLengths, l.Blank, l.Reduction, l.ZeroInfinity)
}

// BCEWithLogitsLoss is nn.BCEWithLogitsLoss.
type BCEWithLogitsLoss struct {
	Weight    *torch.Tensor // rescales each element's loss, or nil
	PosWeight *torch.Tensor // weight of positive examples per class, or nil
	Reduction torch.Reduction
}

// NewBCEWithLogitsLoss returns the loss with PyTorch's defaults.
func NewBCEWithLogitsLoss() *BCEWithLogitsLoss {
	return &BCEWithLogitsLoss{Reduction: torch.ReduceMean}
}

// Forward computes the loss on logits and float targets in [0, 1].
func (l *BCEWithLogitsLoss) Forward(logits, target *torch.Tensor) *torch.Tensor {
	return torch.BCEWithLogits(logits, target, l.Weight, l.PosWeight, l.Reduction)
}

// L1Loss is nn.L1Loss.
type L1Loss struct{ Reduction torch.Reduction }

// NewL1Loss returns the loss with mean reduction.
func NewL1Loss() *L1Loss { return &L1Loss{Reduction: torch.ReduceMean} }

// Forward computes the loss.
func (l *L1Loss) Forward(x, y *torch.Tensor) *torch.Tensor { return torch.L1Loss(x, y, l.Reduction) }

// MSELoss is nn.MSELoss.
type MSELoss struct{ Reduction torch.Reduction }

// NewMSELoss returns the loss with mean reduction.
func NewMSELoss() *MSELoss { return &MSELoss{Reduction: torch.ReduceMean} }

// Forward computes the loss.
func (l *MSELoss) Forward(x, y *torch.Tensor) *torch.Tensor { return torch.MSELoss(x, y, l.Reduction) }

// SmoothL1Loss is nn.SmoothL1Loss (quadratic below Beta, linear above).
type SmoothL1Loss struct {
	Reduction torch.Reduction
	Beta      float64
}

// NewSmoothL1Loss returns the loss with PyTorch's defaults (mean, beta 1).
func NewSmoothL1Loss() *SmoothL1Loss { return &SmoothL1Loss{Reduction: torch.ReduceMean, Beta: 1} }

// Forward computes the loss.
func (l *SmoothL1Loss) Forward(x, y *torch.Tensor) *torch.Tensor {
	return torch.SmoothL1Loss(x, y, l.Reduction, l.Beta)
}

// CLIPLoss is CLIP's symmetric contrastive loss with a learned temperature:
// parameter logit_scale (a scalar) starts at ln(1/0.07); the logit scale
// exp(logit_scale) is clamped at MaxScale (100, as OpenAI CLIP). Row i of
// the image and text embeddings is a matching pair; the others in the batch
// are negatives.
type CLIPLoss struct {
	Base
	LogitScale *torch.Tensor
	MaxScale   float64
}

// NewCLIPLoss returns the loss module.
func NewCLIPLoss() *CLIPLoss {
	c := &CLIPLoss{MaxScale: 100}
	c.LogitScale = c.RegisterParam("logit_scale", torch.Scalar(math.Log(1/0.07)))
	return c
}

// Logits returns logits_per_image (N, N) = scale·îmg·t̂xtᵀ on L2-normalised
// embeddings (N, D); logits_per_text is its transpose.
func (c *CLIPLoss) Logits(img, txt *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		in := img.Div(img.NormDim(2, []int64{-1}, true))
		tn := txt.Div(txt.NormDim(2, []int64{-1}, true))
		scale := c.LogitScale.Exp().ClampMax(c.MaxScale)
		return in.Matmul(tn.T()).Mul(scale)
	})
}

// Forward returns (CE(logits_per_image, arange) + CE(logits_per_text, arange))/2.
func (c *CLIPLoss) Forward(img, txt *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		logits := c.Logits(img, txt)
		labels := torch.Arange(0, float64(logits.Size(0)), 1, logits.Device())
		a := torch.CrossEntropy(logits, labels, nil, torch.ReduceMean, -100, 0)
		b := torch.CrossEntropy(logits.T(), labels, nil, torch.ReduceMean, -100, 0)
		return a.Add(b).DivScalar(2)
	})
}
