package nn

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/torchfit/torchfit/torch"
)

// fusedOptimizers selects the fused (one native call) step where an
// optimizer has one (Adam, AdamW).
var fusedOptimizers atomic.Bool

func init() { fusedOptimizers.Store(true) }

// SetFusedOptimizers turns the fused optimizer steps on (the default) or
// off and returns the previous setting. Off, Adam and AdamW run PyTorch's
// ops parameter by parameter (for comparison; the results agree to float32
// rounding, see torch.AdamStep).
func SetFusedOptimizers(on bool) (prev bool) { return fusedOptimizers.Swap(on) }

// Optimizer updates parameters from their gradients.
//
// Step runs under NoGrad and inside its own torch.Tidy scope: parameters
// are updated in place (their *torch.Tensor stays valid and keeps its
// identity), parameters whose gradient is nil are skipped, and every
// temporary is released before Step returns. Tensor errors panic with
// *torch.Error, as tensor math does (torch.Try turns them into errors).
type Optimizer interface {
	// Step applies one update to every parameter that has a gradient.
	// Hyperparameters that cannot make one (a NaN or negative learning
	// rate a schedule set, say) panic with *torch.Error before any
	// parameter changes.
	Step()
	// ZeroGrad sets every parameter's gradient to none (PyTorch's
	// zero_grad(set_to_none=True), its default since 2.0).
	ZeroGrad()
	// Groups returns the parameter groups. Their hyperparameters may be
	// changed between steps (schedules set LR).
	Groups() []*Group
	// Parameters returns the tensors of every group, in order (GradScaler
	// unscales their gradients).
	Parameters() []*torch.Tensor
	// State returns the optimizer state as named tensors, for checkpoints:
	// "param_groups.<i>.<hyperparameter>" (0-d float64) and
	// "state.<param name>.<buffer>" (see each optimizer). The tensors are
	// the optimizer's own, not copies: do not free or modify them; they
	// are valid until the next Step, State, LoadState or Free.
	State() torch.StateDict
	// LoadState restores what State returned (values are copied; the
	// map's tensors stay the caller's). Everything is checked before
	// anything changes: unknown keys, missing hyperparameters, shape
	// mismatches are errors and leave the optimizer as it was. Parameters
	// without state in sd lose theirs, as in PyTorch.
	LoadState(sd map[string]*torch.Tensor) error
	// Free releases the optimizer's state tensors; the optimizer must not
	// be used afterwards.
	Free()
}

// Group is a set of parameters sharing hyperparameters. Fields that an
// optimizer does not use are ignored by it (and left out of its State).
type Group struct {
	Params []Named

	LR          float64
	WeightDecay float64
	// InitialLR is the learning rate schedules scale (PyTorch's
	// initial_lr); 0 until a Schedule is attached, which sets it to LR.
	InitialLR float64
	// Maximize ascends the objective instead of descending it.
	Maximize bool

	// SGD
	Momentum  float64
	Dampening float64
	Nesterov  bool

	// Adam, AdamW
	Beta1, Beta2 float64
	Eps          float64
	AMSGrad      bool
}

// ParamGroup names parameters that get their own learning rate or weight
// decay; nil fields take the optimizer's configured value. Build one with
// ParamGroup{Params: ps}.WithLR(1e-4).WithWeightDecay(0).
type ParamGroup struct {
	Params      []Named
	LR          *float64
	WeightDecay *float64
}

// WithLR returns g with its own learning rate.
func (g ParamGroup) WithLR(lr float64) ParamGroup { g.LR = &lr; return g }

// WithWeightDecay returns g with its own weight decay.
func (g ParamGroup) WithWeightDecay(wd float64) ParamGroup { g.WeightDecay = &wd; return g }

// DecayGroups splits params into two groups, the common recipe for
// weight decay: the first gets weightDecay, the second none. A parameter
// goes into the no-decay group when it has at most one dimension (biases,
// normalisation weights and biases) or its name ends in "bias". Both
// groups are always returned (possibly empty), so group indices in a
// checkpoint do not depend on the model.
func DecayGroups(params []Named, weightDecay float64) []ParamGroup {
	var decay, noDecay []Named
	for _, p := range params {
		if p.T.Dim() <= 1 || strings.HasSuffix(p.Name, "bias") {
			noDecay = append(noDecay, p)
		} else {
			decay = append(decay, p)
		}
	}
	return []ParamGroup{
		ParamGroup{Params: decay}.WithWeightDecay(weightDecay),
		ParamGroup{Params: noDecay}.WithWeightDecay(0),
	}
}

// ---- shared machinery -------------------------------------------------------------------

// optimParamState is one parameter's optimizer state.
type optimParamState struct {
	step  float32 // PyTorch keeps the step as a float32 tensor
	stepT *torch.Tensor
	bufs  map[string]*torch.Tensor
}

// optimHyper describes one group hyperparameter in State.
type optimHyper struct {
	name string
	get  func(g *Group) float64
	set  func(g *Group, v float64)
}

func optimBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	hyperLR          = optimHyper{"lr", func(g *Group) float64 { return g.LR }, func(g *Group, v float64) { g.LR = v }}
	hyperInitialLR   = optimHyper{"initial_lr", func(g *Group) float64 { return g.InitialLR }, func(g *Group, v float64) { g.InitialLR = v }}
	hyperWeightDecay = optimHyper{"weight_decay", func(g *Group) float64 { return g.WeightDecay }, func(g *Group, v float64) { g.WeightDecay = v }}
	hyperMaximize    = optimHyper{"maximize", func(g *Group) float64 { return optimBool(g.Maximize) }, func(g *Group, v float64) { g.Maximize = v != 0 }}
	hyperMomentum    = optimHyper{"momentum", func(g *Group) float64 { return g.Momentum }, func(g *Group, v float64) { g.Momentum = v }}
	hyperDampening   = optimHyper{"dampening", func(g *Group) float64 { return g.Dampening }, func(g *Group, v float64) { g.Dampening = v }}
	hyperNesterov    = optimHyper{"nesterov", func(g *Group) float64 { return optimBool(g.Nesterov) }, func(g *Group, v float64) { g.Nesterov = v != 0 }}
	hyperBeta1       = optimHyper{"beta1", func(g *Group) float64 { return g.Beta1 }, func(g *Group, v float64) { g.Beta1 = v }}
	hyperBeta2       = optimHyper{"beta2", func(g *Group) float64 { return g.Beta2 }, func(g *Group, v float64) { g.Beta2 = v }}
	hyperEps         = optimHyper{"eps", func(g *Group) float64 { return g.Eps }, func(g *Group, v float64) { g.Eps = v }}
	hyperAMSGrad     = optimHyper{"amsgrad", func(g *Group) float64 { return optimBool(g.AMSGrad) }, func(g *Group, v float64) { g.AMSGrad = v != 0 }}
)

// optimBase holds what every optimizer shares: groups, per-parameter
// state, and the State/LoadState plumbing.
type optimBase struct {
	kind    string
	groups  []*Group
	names   map[*torch.Tensor]string
	byName  map[string]*torch.Tensor
	state   map[*torch.Tensor]*optimParamState
	hypers  []optimHyper
	bufKeys []string // state buffers, in State order
	hasStep bool     // state.<name>.step is kept
	// required lists the buffers a loaded parameter state must have.
	required []string
	hp       map[string]*torch.Tensor // cached hyperparameter tensors for State
}

func newOptimBase(kind string, groups []ParamGroup, lr, wd float64, fill func(g *Group)) optimBase {
	o := optimBase{
		kind:   kind,
		names:  map[*torch.Tensor]string{},
		byName: map[string]*torch.Tensor{},
		state:  map[*torch.Tensor]*optimParamState{},
		hp:     map[string]*torch.Tensor{},
	}
	if len(groups) == 0 {
		panic(invalid("%s: no parameter groups", kind))
	}
	idx := 0
	for gi, pg := range groups {
		g := &Group{LR: lr, WeightDecay: wd}
		fill(g)
		if pg.LR != nil {
			g.LR = *pg.LR
		}
		if pg.WeightDecay != nil {
			g.WeightDecay = *pg.WeightDecay
		}
		if err := rateErr(g); err != nil {
			panic(invalid("%s: group %d: %v", kind, gi, err))
		}
		for _, p := range pg.Params {
			if p.T == nil {
				panic(invalid("%s: parameter %q is nil", kind, p.Name))
			}
			if _, dup := o.names[p.T]; dup {
				panic(invalid("%s: parameter %q appears more than once", kind, p.Name))
			}
			name := p.Name
			if name == "" {
				name = strconv.Itoa(idx)
			}
			if _, dup := o.byName[name]; dup {
				panic(invalid("%s: two parameters are named %q", kind, name))
			}
			o.names[p.T] = name
			o.byName[name] = p.T
			g.Params = append(g.Params, Named{Name: name, T: p.T})
			idx++
		}
		o.groups = append(o.groups, g)
	}
	return o
}

// checkGroups panics with *torch.Error, before any parameter changes, when
// a group's hyperparameters cannot make a step: they may be changed
// between steps (a schedule's LRLambda, LoadState, the caller), and a NaN
// learning rate would turn every parameter to NaN silently. extra checks
// the optimizer's own hyperparameters.
func (o *optimBase) checkGroups(extra func(g *Group) error) {
	for gi, g := range o.groups {
		err := extra(g)
		if rerr := rateErr(g); rerr != nil {
			err = rerr
		}
		if err != nil {
			panic(&torch.Error{Op: o.kind + ".Step", Msg: fmt.Sprintf("group %d: %v", gi, err)})
		}
	}
}

// rateErr says why a group's learning rate or weight decay cannot make a
// step (nil when they can): the constructors' check and Step's.
func rateErr(g *Group) error {
	if !finiteNonNegative(g.LR) || !finiteNonNegative(g.WeightDecay) {
		return fmt.Errorf("lr %v and weight decay %v must be finite and >= 0", g.LR, g.WeightDecay)
	}
	return nil
}

// finiteNonNegative reports whether v is a number in [0, +Inf).
func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

func (o *optimBase) Groups() []*Group { return o.groups }

// Kind returns the PyTorch class the optimizer is: "SGD", "Adam" or
// "AdamW" (checkpoints write its state_dict layout, train/ckpt).
func (o *optimBase) Kind() string { return o.kind }

// KindOf returns o's PyTorch class name (o.Kind() for an optimizer that
// has one, wrappers included), or "" when o does not say.
func KindOf(o Optimizer) string {
	if k, ok := o.(interface{ Kind() string }); ok {
		return k.Kind()
	}
	return ""
}

func (o *optimBase) Parameters() []*torch.Tensor {
	var out []*torch.Tensor
	for _, g := range o.groups {
		out = append(out, Tensors(g.Params)...)
	}
	return out
}

func (o *optimBase) ZeroGrad() {
	for _, g := range o.groups {
		for _, p := range g.Params {
			p.T.SetGrad(nil)
		}
	}
}

// forEach runs fn for every parameter with a gradient, under NoGrad and in
// a Tidy scope per parameter that releases its temporaries (the gradient
// reference included), so a step's peak is one parameter's temporaries.
// State created by fn must be Kept.
func (o *optimBase) forEach(fn func(g *Group, p *torch.Tensor, grad *torch.Tensor, st *optimParamState)) {
	torch.NoGrad(func() {
		for _, g := range o.groups {
			for _, p := range g.Params {
				torch.Tidy(func() {
					grad := p.T.Grad()
					if grad == nil {
						return
					}
					st := o.state[p.T]
					if st == nil {
						st = &optimParamState{bufs: map[string]*torch.Tensor{}}
						o.state[p.T] = st
					}
					fn(g, p.T, grad, st)
				})
			}
		}
	})
}

// optimZeros returns a kept zero tensor shaped like p.
func optimZeros(p *torch.Tensor) *torch.Tensor { return torch.ZerosLike(p).Keep() }

func (o *optimBase) hpTensor(key string, v float64) *torch.Tensor {
	t := o.hp[key]
	if t == nil {
		t = torch.Scalar(v, torch.Float64).Keep()
		o.hp[key] = t
	} else {
		t.FillIn(v)
	}
	return t
}

func (o *optimBase) State() torch.StateDict {
	var out torch.StateDict
	for gi, g := range o.groups {
		for _, h := range o.hypers {
			key := fmt.Sprintf("param_groups.%d.%s", gi, h.name)
			out = append(out, Named{Name: key, T: o.hpTensor(key, h.get(g))})
		}
	}
	for _, g := range o.groups {
		for _, p := range g.Params {
			st := o.state[p.T]
			if st == nil {
				continue
			}
			prefix := "state." + p.Name + "."
			if o.hasStep {
				if st.stepT == nil {
					st.stepT = torch.Scalar(float64(st.step)).Keep()
				} else {
					st.stepT.FillIn(float64(st.step))
				}
				out = append(out, Named{Name: prefix + "step", T: st.stepT})
			}
			for _, k := range o.bufKeys {
				if b := st.bufs[k]; b != nil {
					out = append(out, Named{Name: prefix + k, T: b})
				}
			}
		}
	}
	return out
}

func (o *optimBase) LoadState(sd map[string]*torch.Tensor) error {
	err := o.loadState(sd)
	if err != nil {
		return fmt.Errorf("nn: %s.LoadState: %w", o.kind, err)
	}
	return nil
}

func (o *optimBase) loadState(sd map[string]*torch.Tensor) error {
	hyperIdx := map[string]int{}
	for k, h := range o.hypers {
		hyperIdx[h.name] = k
	}
	bufOK := map[string]bool{}
	for _, k := range o.bufKeys {
		bufOK[k] = true
	}
	type pstate struct {
		step *torch.Tensor
		bufs map[string]*torch.Tensor
	}
	hv := make([][]*torch.Tensor, len(o.groups))
	for k := range hv {
		hv[k] = make([]*torch.Tensor, len(o.hypers))
	}
	ps := map[string]*pstate{}
	keys := make([]string, 0, len(sd))
	for k := range sd {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	err := optimCatch(func() {
		for _, key := range keys {
			t := sd[key]
			if t == nil || t.Freed() {
				panic(fmt.Errorf("%s: nil or freed tensor", key))
			}
			switch {
			case strings.HasPrefix(key, "param_groups."):
				rest := strings.TrimPrefix(key, "param_groups.")
				i := strings.IndexByte(rest, '.')
				if i < 0 {
					panic(fmt.Errorf("unexpected key %q", key))
				}
				gi, e := strconv.Atoi(rest[:i])
				hi, ok := hyperIdx[rest[i+1:]]
				if e != nil || gi < 0 || gi >= len(o.groups) || !ok {
					panic(fmt.Errorf("unexpected key %q (%d parameter groups)", key, len(o.groups)))
				}
				if t.Numel() != 1 {
					panic(fmt.Errorf("%s: want one element, have shape %v", key, t.Shape()))
				}
				hv[gi][hi] = t
			case strings.HasPrefix(key, "state."):
				rest := strings.TrimPrefix(key, "state.")
				i := strings.LastIndexByte(rest, '.')
				if i < 0 {
					panic(fmt.Errorf("unexpected key %q", key))
				}
				name, buf := rest[:i], rest[i+1:]
				p, ok := o.byName[name]
				if !ok {
					panic(fmt.Errorf("unexpected key %q: no parameter %q", key, name))
				}
				s := ps[name]
				if s == nil {
					s = &pstate{bufs: map[string]*torch.Tensor{}}
					ps[name] = s
				}
				switch {
				case buf == "step" && o.hasStep:
					if t.Numel() != 1 {
						panic(fmt.Errorf("%s: want one element, have shape %v", key, t.Shape()))
					}
					s.step = t
				case bufOK[buf]:
					if !sameShape(t.Shape(), p.Shape()) {
						panic(fmt.Errorf("size mismatch for %s: the checkpoint has shape %v, the parameter %v", key, t.Shape(), p.Shape()))
					}
					s.bufs[buf] = t
				default:
					panic(fmt.Errorf("unexpected key %q", key))
				}
			default:
				panic(fmt.Errorf("unexpected key %q", key))
			}
		}
	})
	if err != nil {
		return err
	}
	if e := optimCatch(func() {
		for gi := range o.groups {
			for hi, h := range o.hypers {
				if hv[gi][hi] == nil {
					panic(fmt.Errorf("missing key param_groups.%d.%s", gi, h.name))
				}
			}
		}
		for name, s := range ps {
			if o.hasStep && s.step == nil {
				panic(fmt.Errorf("missing key state.%s.step", name))
			}
			for _, k := range o.required {
				if s.bufs[k] == nil {
					panic(fmt.Errorf("missing key state.%s.%s", name, k))
				}
			}
		}
	}); e != nil {
		return e
	}
	// Read everything that needs a host sync before changing anything.
	vals := make([][]float64, len(o.groups))
	steps := map[string]float32{}
	err = optimCatch(func() {
		for gi := range o.groups {
			vals[gi] = make([]float64, len(o.hypers))
			for hi := range o.hypers {
				vals[gi][hi] = hv[gi][hi].Item()
			}
		}
		for name, s := range ps {
			if s.step != nil {
				steps[name] = float32(s.step.Item())
			}
		}
	})
	if err != nil {
		return err
	}
	return torch.Try(func() {
		torch.NoGrad(func() {
			for gi, g := range o.groups {
				for hi, h := range o.hypers {
					h.set(g, vals[gi][hi])
				}
			}
			for _, g := range o.groups {
				for _, p := range g.Params {
					s := ps[p.Name]
					old := o.state[p.T]
					if s == nil {
						if old != nil {
							old.free()
							delete(o.state, p.T)
						}
						continue
					}
					if old == nil {
						old = &optimParamState{bufs: map[string]*torch.Tensor{}}
						o.state[p.T] = old
					}
					old.step = steps[p.Name]
					for k, b := range old.bufs {
						if s.bufs[k] == nil {
							b.Free()
							delete(old.bufs, k)
						}
					}
					for k, src := range s.bufs {
						dst := old.bufs[k]
						if dst == nil {
							dst = optimZeros(p.T)
							old.bufs[k] = dst
						}
						dst.CopyFrom(src)
					}
				}
			}
		})
	})
}

// optimCatch runs fn and returns the error it panicked with (Go runtime
// errors, which are bugs, still panic).
func optimCatch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if _, rt := r.(runtime.Error); !ok || rt {
				panic(r)
			}
			err = e
		}
	}()
	fn()
	return nil
}

func (s *optimParamState) free() {
	s.stepT.Free()
	s.stepT = nil
	for k, b := range s.bufs {
		b.Free()
		delete(s.bufs, k)
	}
}

func (o *optimBase) Free() {
	for p, s := range o.state {
		s.free()
		delete(o.state, p)
	}
	for k, t := range o.hp {
		t.Free()
		delete(o.hp, k)
	}
}
