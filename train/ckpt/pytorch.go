package ckpt

// PyTorch's layouts of an optimizer's, a schedule's and a GradScaler's
// state: what Writer.Optimizer/Schedule/Scaler write and File's methods
// read (besides torchfit's older flat layouts).

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// pytorch1 reports whether the loaded libtorch is PyTorch 1.x, whose
// state_dict()s have fewer keys than 2.x's.
func pytorch1() bool {
	maj, _, _ := torch.LibtorchVersion()
	return maj < 2
}

// groupKey is a key of a param_groups dict: a hyperparameter of the group
// ("betas" is beta1 and beta2), or one torchfit does not keep (foreach,
// fused, ...) with PyTorch's default value.
type groupKey struct {
	name  string
	fixed any // nil: from the group
	hyper bool
}

func hk(name string) groupKey        { return groupKey{name: name, hyper: true} }
func fk(name string, v any) groupKey { return groupKey{name: name, fixed: v} }

// groupLayout is an optimizer's param_groups keys in PyTorch's order
// ("initial_lr" and "params" follow), as the state_dict() of PyTorch 1.13
// (v1) or 2.11 gives them; nil for a kind PyTorch does not have.
func groupLayout(kind string, v1 bool) []groupKey {
	switch kind {
	case "SGD":
		ks := []groupKey{hk("lr"), hk("momentum"), hk("dampening"), hk("weight_decay"), hk("nesterov"), hk("maximize"),
			fk("foreach", nil), fk("differentiable", false)}
		if !v1 {
			ks = append(ks, fk("fused", nil))
		}
		return ks
	case "Adam", "AdamW":
		if v1 && kind == "AdamW" { // 1.13's AdamW
			return []groupKey{hk("lr"), hk("betas"), hk("eps"), hk("weight_decay"), hk("amsgrad"), fk("foreach", nil), hk("maximize"), fk("capturable", false)}
		}
		ks := []groupKey{hk("lr"), hk("betas"), hk("eps"), hk("weight_decay"), hk("amsgrad"), hk("maximize"),
			fk("foreach", nil), fk("capturable", false), fk("differentiable", false)}
		if v1 {
			return append(ks, fk("fused", false))
		}
		return append(ks, fk("fused", nil), fk("decoupled_weight_decay", kind == "AdamW"))
	}
	return nil
}

// boolHypers are the hyperparameters PyTorch keeps as bools.
var boolHypers = map[string]bool{"nesterov": true, "maximize": true, "amsgrad": true}

// flatState is an optimizer's State split up: hyperparameters by group,
// buffers by parameter index (numbered across the groups in order, as
// PyTorch numbers them).
type flatState struct {
	hypers []map[string]float64
	order  [][]string // hyperparameter names per group, in State order
	bufs   map[int][]nn.Named
	index  map[string]int // parameter name → index
	names  []string       // index → parameter name
	shapes [][]int64
}

func paramIndex(o nn.Optimizer) (map[string]int, []string, [][]int64) {
	index := map[string]int{}
	var names []string
	var shapes [][]int64
	for _, g := range o.Groups() {
		for _, p := range g.Params {
			index[p.Name] = len(names)
			names = append(names, p.Name)
			shapes = append(shapes, p.T.Shape())
		}
	}
	return index, names, shapes
}

// splitState parses o.State().
func splitState(o nn.Optimizer) (*flatState, error) {
	fs := &flatState{bufs: map[int][]nn.Named{}}
	fs.index, fs.names, fs.shapes = paramIndex(o)
	n := len(o.Groups())
	fs.hypers = make([]map[string]float64, n)
	fs.order = make([][]string, n)
	for k := range fs.hypers {
		fs.hypers[k] = map[string]float64{}
	}
	for _, s := range o.State() {
		if rest, ok := strings.CutPrefix(s.Name, "param_groups."); ok {
			gs, h, ok := strings.Cut(rest, ".")
			gi, err := strconv.Atoi(gs)
			if !ok || err != nil || gi < 0 || gi >= n {
				return nil, fmt.Errorf("optimizer state key %q", s.Name)
			}
			fs.hypers[gi][h] = s.T.Item()
			fs.order[gi] = append(fs.order[gi], h)
			continue
		}
		rest, ok := strings.CutPrefix(s.Name, "state.")
		i := strings.LastIndexByte(rest, '.')
		if !ok || i < 0 {
			return nil, fmt.Errorf("optimizer state key %q", s.Name)
		}
		idx, ok := fs.index[rest[:i]]
		if !ok {
			return nil, fmt.Errorf("optimizer state key %q: no such parameter", s.Name)
		}
		fs.bufs[idx] = append(fs.bufs[idx], nn.Named{Name: rest[i+1:], T: s.T})
	}
	return fs, nil
}

// optimizerType is nn.Optimizer's interface type.
var optimizerType = reflect.TypeFor[nn.Optimizer]()

// kindOf is nn.KindOf(o), looking through wrappers that embed the
// optimizer (struct{ nn.Optimizer; ... }, as a recipe counts or measures
// its steps): such a struct's method set has no Kind, though its Groups
// and State are the embedded optimizer's. wrapped reports that the kind
// came from an embedded optimizer.
func kindOf(o nn.Optimizer) (kind string, wrapped bool) {
	for depth := 0; o != nil && depth < 8; depth++ {
		if k := nn.KindOf(o); k != "" {
			return k, depth > 0
		}
		v := reflect.ValueOf(o)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return "", false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return "", false
		}
		var inner nn.Optimizer
		for k := range v.NumField() {
			f := v.Type().Field(k)
			if f.Anonymous && f.Type == optimizerType && v.Field(k).CanInterface() {
				inner, _ = v.Field(k).Interface().(nn.Optimizer)
				break
			}
		}
		o = inner
	}
	return "", false
}

// optimizerDict returns o's state in PyTorch's state_dict layout, or nil
// when o is no optimizer PyTorch has (its flat layout is written then).
func optimizerDict(o nn.Optimizer) (*ptfile.Dict, error) {
	kind, wrapped := kindOf(o)
	v1 := pytorch1()
	layout := groupLayout(kind, v1)
	if layout == nil {
		return nil, nil
	}
	fs, err := splitState(o)
	if err != nil {
		if wrapped { // a wrapper with a State of its own: keep it flat
			return nil, nil
		}
		return nil, err
	}
	state := ptfile.NewDict()
	for idx := range fs.names {
		bufs := fs.bufs[idx]
		if len(bufs) == 0 {
			continue
		}
		d := ptfile.NewDict()
		for _, b := range bufs {
			d.Set(b.Name, b.T)
		}
		state.Set(int64(idx), d)
	}
	var groups []any
	next := 0
	for gi, g := range o.Groups() {
		h := fs.hypers[gi]
		d := ptfile.NewDict()
		for _, k := range layout {
			switch {
			case !k.hyper:
				d.Set(k.name, k.fixed)
			case k.name == "betas":
				d.Set("betas", ptfile.Tuple{h["beta1"], h["beta2"]})
			case boolHypers[k.name]:
				d.Set(k.name, h[k.name] != 0)
			default:
				d.Set(k.name, h[k.name])
			}
		}
		if lr0 := h["initial_lr"]; lr0 != 0 { // a schedule is attached
			d.Set("initial_lr", lr0)
		}
		params := make([]any, len(g.Params))
		for k := range params {
			params[k] = int64(next)
			next++
		}
		d.Set("params", params)
		groups = append(groups, d)
	}
	return ptfile.NewDict("state", state, "param_groups", groups), nil
}

// isPyTorchOptimizer reports whether d is an optimizer's state_dict().
func isPyTorchOptimizer(d *ptfile.Dict) bool {
	_, s := d.Get("state")
	_, g := d.Get("param_groups")
	return s && g
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case bool:
		if n {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// optimizerFromPyTorch turns a state_dict() into the named tensors of
// o.LoadState. The tensors it makes (hyperparameters, steps kept as
// numbers) are freed by the returned func; the file's are the file's.
func optimizerFromPyTorch(d *ptfile.Dict, o nn.Optimizer) (sd map[string]*torch.Tensor, free func(), err error) {
	var made []*torch.Tensor
	free = func() {
		for _, t := range made {
			t.Free()
		}
	}
	defer func() {
		if err != nil {
			free()
		}
	}()
	scalar := func(v float64, dt torch.DType) *torch.Tensor {
		t := torch.Scalar(v, dt).Keep()
		made = append(made, t)
		return t
	}
	fs, err := splitState(o) // the hyperparameters o keeps, and their current values
	if err != nil {
		return nil, free, err
	}
	gv, _ := d.Get("param_groups")
	groups, ok := gv.([]any)
	if !ok {
		return nil, free, fmt.Errorf("param_groups is a %T, not a list", gv)
	}
	if len(groups) != len(o.Groups()) {
		return nil, free, fmt.Errorf("the file's optimizer has %d parameter groups, this one %d", len(groups), len(o.Groups()))
	}
	sd = map[string]*torch.Tensor{}
	byIndex := map[int64]int{} // the file's parameter index → ours
	next := 0
	for gi, x := range groups {
		g, ok := x.(*ptfile.Dict)
		if !ok {
			return nil, free, fmt.Errorf("param_groups[%d] is a %T, not a dict", gi, x)
		}
		pv, _ := g.Get("params")
		params, ok := pv.([]any)
		if !ok {
			return nil, free, fmt.Errorf("param_groups[%d][\"params\"] is a %T, not a list", gi, pv)
		}
		if want := len(o.Groups()[gi].Params); len(params) != want {
			return nil, free, fmt.Errorf("param_groups[%d] has %d parameters, this optimizer's group %d", gi, len(params), want)
		}
		for _, p := range params {
			i, ok := p.(int64)
			if !ok {
				return nil, free, fmt.Errorf("param_groups[%d][\"params\"] holds %v, not an index", gi, p)
			}
			if _, dup := byIndex[i]; dup {
				return nil, free, fmt.Errorf("parameter index %d appears twice in param_groups", i)
			}
			byIndex[i] = next
			next++
		}
		for _, h := range fs.order[gi] {
			key := fmt.Sprintf("param_groups.%d.%s", gi, h)
			var v float64
			switch h {
			case "beta1", "beta2":
				bv, _ := g.Get("betas")
				var bs []any
				switch b := bv.(type) {
				case ptfile.Tuple:
					bs = b
				case []any:
					bs = b
				}
				if len(bs) != 2 {
					return nil, free, fmt.Errorf("param_groups[%d][\"betas\"] is %v, not two numbers", gi, bv)
				}
				if v, ok = number(bs[map[string]int{"beta1": 0, "beta2": 1}[h]]); !ok {
					return nil, free, fmt.Errorf("param_groups[%d][\"betas\"] is %v, not two numbers", gi, bv)
				}
			default:
				x, has := g.Get(h)
				switch {
				case has:
					if v, ok = number(x); !ok {
						return nil, free, fmt.Errorf("param_groups[%d][%q] is %v, not a number", gi, h, x)
					}
				case h == "initial_lr": // no schedule wrote it: keep ours
					v = fs.hypers[gi][h]
				case boolHypers[h]: // PyTorch's setdefault(..., False)
					v = 0
				default:
					return nil, free, fmt.Errorf("param_groups[%d] has no %q", gi, h)
				}
			}
			sd[key] = scalar(v, torch.Float64)
		}
	}
	sv, _ := d.Get("state")
	state, ok := sv.(*ptfile.Dict)
	if !ok {
		return nil, free, fmt.Errorf("state is a %T, not a dict", sv)
	}
	for _, e := range state.Entries {
		i, ok := e.Key.(int64)
		idx, known := byIndex[i]
		if !ok || !known {
			return nil, free, fmt.Errorf("state[%v]: no such parameter in param_groups (%d parameters)", e.Key, next)
		}
		bufs, ok := e.Value.(*ptfile.Dict)
		if !ok {
			return nil, free, fmt.Errorf("state[%d] is a %T, not a dict", i, e.Value)
		}
		name := fs.names[idx]
		for _, b := range bufs.Entries {
			bn, _ := b.Key.(string)
			key := "state." + name + "." + bn
			switch t := b.Value.(type) {
			case nil: // SGD's momentum_buffer without momentum (1.13)
			case *torch.Tensor:
				if bn != "step" && fmt.Sprint(t.Shape()) != fmt.Sprint(fs.shapes[idx]) {
					return nil, free, fmt.Errorf("state[%d][%q] (%s) has shape %v, the parameter %v", i, bn, name, t.Shape(), fs.shapes[idx])
				}
				sd[key] = t
			default:
				v, ok := number(t)
				if !ok || bn != "step" { // PyTorch before 1.12 kept the step as a number
					return nil, free, fmt.Errorf("state[%d][%q] is a %T, not a tensor", i, bn, b.Value)
				}
				sd[key] = scalar(v, torch.Float32)
			}
		}
	}
	return sd, free, nil
}

// ---- schedule -------------------------------------------------------------------

// scheduleDict is s's state as LambdaLR's state_dict().
func scheduleDict(s *nn.Schedule) *ptfile.Dict {
	base, last := s.BaseLRs(), s.LastStep()
	lrs := s.LRs(last)
	bl, ll, fns := make([]any, len(base)), make([]any, len(base)), make([]any, len(base))
	for k := range base {
		bl[k], ll[k] = base[k], lrs[k]
	}
	d := ptfile.NewDict("base_lrs", bl, "last_epoch", int64(last))
	if pytorch1() {
		d.Set("verbose", false)
	}
	d.Set("_step_count", int64(last+1))
	if !pytorch1() {
		d.Set("_is_initial", false)
	}
	d.Set("_get_lr_called_within_step", false)
	d.Set("_last_lr", ll)
	d.Set("lr_lambdas", fns) // None: a function, which PyTorch does not save
	return d
}

// scheduleFromPyTorch reads a scheduler's state_dict() (base_lrs,
// last_epoch: LambdaLR's and most others').
func scheduleFromPyTorch(d *ptfile.Dict) (last int, base []float64, err error) {
	bv, _ := d.Get("base_lrs")
	bl, ok := bv.([]any)
	if !ok {
		return 0, nil, fmt.Errorf("base_lrs is a %T, not a list", bv)
	}
	for _, x := range bl {
		v, ok := number(x)
		if !ok {
			return 0, nil, fmt.Errorf("base_lrs holds %v, not a number", x)
		}
		base = append(base, v)
	}
	lv, _ := d.Get("last_epoch")
	n, ok := lv.(int64)
	if !ok {
		return 0, nil, fmt.Errorf("last_epoch is %v, not an integer", lv)
	}
	return int(n), base, nil
}

// ---- scaler ---------------------------------------------------------------------

// scalerDict is s's state as GradScaler.state_dict(): empty when disabled.
func scalerDict(s *amp.GradScaler) *ptfile.Dict {
	d := ptfile.NewDict()
	if !s.Enabled() {
		return d
	}
	st := s.State()
	d.Set("scale", st["scale"])
	d.Set("growth_factor", st["growth_factor"])
	d.Set("backoff_factor", st["backoff_factor"])
	d.Set("growth_interval", int64(st["growth_interval"]))
	d.Set("_growth_tracker", int64(st["growth_tracker"]))
	return d
}
