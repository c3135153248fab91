package nn

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// LRLambda maps a step (0, 1, 2, ...: the number of Schedule.Step calls)
// to a multiplier of each group's base learning rate, as the lr_lambda of
// torch.optim.lr_scheduler.LambdaLR. It must be a pure function.
type LRLambda func(step int) float64

// ConstantLR keeps the base learning rate.
func ConstantLR() LRLambda { return func(int) float64 { return 1 } }

// schedWarmup is step/warmup during warmup (so step 0 trains at lr 0, as
// in Hugging Face transformers' schedules) and 1 afterwards.
func schedWarmup(step, warmup int) (float64, bool) {
	if step < warmup {
		return float64(step) / float64(max(1, warmup)), true
	}
	return 1, false
}

// WarmupLR ramps linearly from 0 to the base learning rate over warmup
// steps and then stays there (transformers' get_constant_schedule_with_warmup).
func WarmupLR(warmup int) LRLambda {
	return func(step int) float64 {
		f, _ := schedWarmup(step, warmup)
		return f
	}
}

// WarmupCosineLR warms up linearly over warmup steps, then follows a half
// cosine from the base learning rate down to minRatio·base at step total,
// and stays at minRatio·base afterwards. With minRatio 0 it is
// transformers' get_cosine_schedule_with_warmup up to step total; with
// warmup 0 it is CosineAnnealingLR's closed form with
// eta_min = minRatio·base, T_max = total.
func WarmupCosineLR(warmup, total int, minRatio float64) LRLambda {
	return func(step int) float64 {
		if f, in := schedWarmup(step, warmup); in {
			return f
		}
		progress := math.Min(1, float64(step-warmup)/float64(max(1, total-warmup)))
		return minRatio + (1-minRatio)*0.5*(1+math.Cos(math.Pi*progress))
	}
}

// WarmupLinearLR warms up linearly over warmup steps, then decays linearly
// to 0 at step total and stays there (transformers'
// get_linear_schedule_with_warmup).
func WarmupLinearLR(warmup, total int) LRLambda {
	return func(step int) float64 {
		if f, in := schedWarmup(step, warmup); in {
			return f
		}
		return math.Max(0, float64(total-step)/float64(max(1, total-warmup)))
	}
}

// StepLR multiplies the learning rate by gamma every stepSize steps:
// gamma^⌊step/stepSize⌋ (StepLR's closed form).
func StepLR(stepSize int, gamma float64) LRLambda {
	if stepSize <= 0 {
		panic(invalid("StepLR: step size %d", stepSize))
	}
	return func(step int) float64 { return math.Pow(gamma, float64(step/stepSize)) }
}

// Schedule sets an optimizer's learning rates from an LRLambda, like
// torch.optim.lr_scheduler.LambdaLR: each group's LR = base·fn(step),
// where base is the group's InitialLR (set to its LR when still 0 when the
// schedule is made). NewSchedule applies step 0; call Step after each
// optimizer step.
type Schedule struct {
	opt   Optimizer
	fn    LRLambda
	step  int
	base  []float64
	stepT *torch.Tensor
	baseT []*torch.Tensor
}

// NewSchedule attaches fn to opt's groups and applies step 0.
func NewSchedule(opt Optimizer, fn LRLambda) *Schedule {
	s := &Schedule{opt: opt, fn: fn}
	for _, g := range opt.Groups() {
		if g.InitialLR == 0 {
			g.InitialLR = g.LR
		}
		s.base = append(s.base, g.InitialLR)
	}
	s.apply()
	return s
}

func (s *Schedule) apply() {
	for k, g := range s.opt.Groups() {
		if k < len(s.base) {
			g.LR = s.base[k] * s.fn(s.step)
		}
	}
}

// Step advances one step and sets the groups' learning rates.
func (s *Schedule) Step() {
	s.step++
	s.apply()
}

// LastStep returns the current step (PyTorch's last_epoch).
func (s *Schedule) LastStep() int { return s.step }

// LR returns the first group's learning rate at step (a pure function).
func (s *Schedule) LR(step int) float64 { return s.base[0] * s.fn(step) }

// LRs returns every group's learning rate at step.
func (s *Schedule) LRs(step int) []float64 {
	out := make([]float64, len(s.base))
	for k, b := range s.base {
		out[k] = b * s.fn(step)
	}
	return out
}

// State returns "last_epoch" (0-d int64) and "base_lrs.<i>" (0-d
// float64). The tensors are the schedule's own, valid until the next
// State, LoadState or Free.
func (s *Schedule) State() torch.StateDict {
	if s.stepT == nil {
		s.stepT = torch.Scalar(float64(s.step), torch.Int64).Keep()
	} else {
		s.stepT.FillIn(float64(s.step))
	}
	out := torch.StateDict{{Name: "last_epoch", T: s.stepT}}
	for k, b := range s.base {
		if k == len(s.baseT) {
			s.baseT = append(s.baseT, torch.Scalar(b, torch.Float64).Keep())
		} else {
			s.baseT[k].FillIn(b)
		}
		out = append(out, Named{Name: "base_lrs." + strconv.Itoa(k), T: s.baseT[k]})
	}
	return out
}

// BaseLRs returns every group's base learning rate (PyTorch's base_lrs).
func (s *Schedule) BaseLRs() []float64 { return append([]float64(nil), s.base...) }

// SetState sets the step (PyTorch's last_epoch) and the base learning
// rates (one per group), and the groups' learning rates for that step, as
// LoadState does from named tensors. A step below 0 or another number of
// base rates than of groups is an error and changes nothing.
func (s *Schedule) SetState(lastEpoch int, baseLRs []float64) error {
	if lastEpoch < 0 {
		return fmt.Errorf("nn: Schedule.SetState: last_epoch %d", lastEpoch)
	}
	if len(baseLRs) != len(s.base) {
		return fmt.Errorf("nn: Schedule.SetState: %d base learning rates for %d parameter groups", len(baseLRs), len(s.base))
	}
	s.step, s.base = lastEpoch, append([]float64(nil), baseLRs...)
	for k, g := range s.opt.Groups() {
		if k < len(s.base) {
			g.InitialLR = s.base[k]
		}
	}
	s.apply()
	return nil
}

// LoadState restores the step and base learning rates and sets the
// groups' learning rates for that step. Unknown or missing keys are
// errors and change nothing.
func (s *Schedule) LoadState(sd map[string]*torch.Tensor) error {
	var step int
	base := make([]float64, len(s.base))
	seen := make([]bool, len(s.base))
	hasStep := false
	err := optimCatch(func() {
		for k, t := range sd {
			if t == nil || t.Numel() != 1 {
				panic(fmt.Errorf("%s: want a one-element tensor", k))
			}
			switch {
			case k == "last_epoch":
				step, hasStep = int(t.ItemInt()), true
			case strings.HasPrefix(k, "base_lrs."):
				i, e := strconv.Atoi(strings.TrimPrefix(k, "base_lrs."))
				if e != nil || i < 0 || i >= len(base) {
					panic(fmt.Errorf("unexpected key %q (%d parameter groups)", k, len(base)))
				}
				base[i], seen[i] = t.Item(), true
			default:
				panic(fmt.Errorf("unexpected key %q", k))
			}
		}
		if !hasStep {
			panic(fmt.Errorf("missing key last_epoch"))
		}
		for i, ok := range seen {
			if !ok {
				panic(fmt.Errorf("missing key base_lrs.%d", i))
			}
		}
	})
	if err != nil {
		return fmt.Errorf("nn: Schedule.LoadState: %w", err)
	}
	return s.SetState(step, base)
}

// Free releases the tensors State made.
func (s *Schedule) Free() {
	s.stepT.Free()
	s.stepT = nil
	for _, t := range s.baseT {
		t.Free()
	}
	s.baseT = nil
}
