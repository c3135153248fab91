package ckpt_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// An optimizer wrapped by embedding (struct{ nn.Optimizer; ... }, as the
// ASR recipe counts its steps) is written in PyTorch's state_dict layout,
// as the optimizer it wraps, not in torchfit's old flat one; a wrapper
// with a State of its own stays flat, and both load back.
func TestWrappedOptimizerLayout(t *testing.T) {
	cases := []struct {
		name    string
		wrap    func(nn.Optimizer) nn.Optimizer
		pytorch bool
	}{
		{"bare", func(o nn.Optimizer) nn.Optimizer { return o }, true},
		{"embedded", func(o nn.Optimizer) nn.Optimizer { return &countingOptimizer{Optimizer: o} }, true},
		{"embedded twice", func(o nn.Optimizer) nn.Optimizer {
			return countingValue{&countingOptimizer{Optimizer: o}}
		}, true},
		{"own state", func(o nn.Optimizer) nn.Optimizer { return &renamingOptimizer{o} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newGoRun(resumeCase{newOpt: func(m nn.Module) nn.Optimizer {
				return c.wrap(nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.1), nn.AdamWDefaults(0.01)))
			}})
			defer r.free()
			r.step()

			path := filepath.Join(t.TempDir(), "c.pt")
			r.save(t, path)
			v, err := ptfile.Load(path)
			require.NoError(t, err)
			defer ptfile.FreeAll(v)
			part, ok := v.(*ptfile.Dict).Get("optimizer")
			require.True(t, ok)
			_, hasGroups := part.(*ptfile.Dict).Get("param_groups")
			require.Equal(t, c.pytorch, hasGroups, "PyTorch's layout")

			f, err := ckpt.Read(path)
			require.NoError(t, err)
			defer f.Free()
			require.NoError(t, f.Optimizer("optimizer", r.opt))
		})
	}
}

// countingValue embeds a wrapper in a value, not a pointer.
type countingValue struct{ nn.Optimizer }

// renamingOptimizer's State is not the embedded optimizer's names.
type renamingOptimizer struct{ nn.Optimizer }

func (r *renamingOptimizer) State() torch.StateDict {
	st := r.Optimizer.State()
	out := make(torch.StateDict, len(st))
	for k, s := range st {
		out[k] = nn.Named{Name: "wrapped." + s.Name, T: s.T}
	}
	return out
}

func (r *renamingOptimizer) LoadState(sd map[string]*torch.Tensor) error {
	in := make(map[string]*torch.Tensor, len(sd))
	for k, t := range sd {
		in[strings.TrimPrefix(k, "wrapped.")] = t
	}
	return r.Optimizer.LoadState(in)
}
