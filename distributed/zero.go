package distributed

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// ZeRO is ZeRO stage 1 (sharded optimizer state, as PyTorch's
// ZeroRedundancyOptimizer): the parameters are split over the ranks (the
// largest first, each to the rank holding the fewest bytes so far), each
// rank keeps optimizer state only for its own — about 1/World of it — and
// updates only those, and then every rank's updated parameters are
// broadcast to all. Gradients are still all-reduced whole (DataParallel),
// so clipping sees the global norm. The result is the unsharded
// optimizer's, bit for bit.
//
// It wraps any nn.Optimizer that skips parameters without a gradient (all
// of package nn's do): Step hides the other ranks' gradients from it.
// Checkpoints hold the whole state, gathered on rank 0 (GatherState: every
// rank calls it, train.Fit does), in the unsharded optimizer's format: a
// run resumes from it with any number of ranks, with or without ZeRO, and
// Python reads it as it reads any torchfit optimizer state. Gathering costs
// rank 0 the whole state's memory while the checkpoint is written; saving
// per-rank shards would not, but would tie the file to the world size.
type ZeRO struct {
	inner       nn.Optimizer
	g           *Group
	bucketBytes int64
	params      []nn.Named // every parameter, in the optimizer's order
	owner       map[*torch.Tensor]int
	own         map[string]bool   // names of this rank's parameters
	byRank      [][]*torch.Tensor // each rank's parameters, in order
	gathered    []nn.Named        // rank 0, between GatherState and release
	received    []*torch.Tensor   // the other ranks' state tensors it holds
}

var _ nn.Optimizer = (*ZeRO)(nil)

// NewZeRO shards opt's state over g's ranks. Every rank builds the same
// optimizer over the same parameters (after DataParallel made them equal)
// and calls NewZeRO; opt must not have stepped yet (its state would stay
// whole).
func NewZeRO(g *Group, opt nn.Optimizer) (*ZeRO, error) {
	z := &ZeRO{inner: opt, g: g, bucketBytes: DefaultBucketBytes, owner: map[*torch.Tensor]int{}, own: map[string]bool{},
		byRank: make([][]*torch.Tensor, g.size)}
	for _, gr := range opt.Groups() {
		z.params = append(z.params, gr.Params...)
	}
	for _, n := range opt.State() {
		if strings.HasPrefix(n.Name, "state.") {
			return nil, usagef("ZeRO: the optimizer already has state (%s): shard it before its first step", n.Name)
		}
	}
	// Largest first, each to the rank with the fewest bytes (ties: the
	// lowest rank); every rank computes the same split.
	idx := make([]int, len(z.params))
	bytes := make([]int64, len(z.params))
	for i, p := range z.params {
		idx[i] = i
		bytes[i] = p.T.NBytes()
	}
	sort.SliceStable(idx, func(a, b int) bool { return bytes[idx[a]] > bytes[idx[b]] })
	load := make([]int64, g.size)
	for _, i := range idx {
		r := 0
		for k := 1; k < g.size; k++ {
			if load[k] < load[r] {
				r = k
			}
		}
		load[r] += bytes[i]
		z.owner[z.params[i].T] = r
	}
	for _, p := range z.params {
		r := z.owner[p.T]
		z.byRank[r] = append(z.byRank[r], p.T)
		if r == g.rank {
			z.own[p.Name] = true
		}
	}
	return z, nil
}

// Inner returns the wrapped optimizer.
func (z *ZeRO) Inner() nn.Optimizer { return z.inner }

// Owner returns the rank that updates p (-1: not a parameter of the
// optimizer).
func (z *ZeRO) Owner(p *torch.Tensor) int {
	if r, ok := z.owner[p]; ok {
		return r
	}
	return -1
}

// StateBytes returns the bytes of this rank's optimizer state tensors.
func (z *ZeRO) StateBytes() int64 {
	var n int64
	for _, s := range z.inner.State() {
		if strings.HasPrefix(s.Name, "state.") {
			n += s.T.NBytes()
		}
	}
	return n
}

// Step updates this rank's parameters with the wrapped optimizer and
// broadcasts every rank's updated parameters. A failed broadcast panics
// with a *torch.Error wrapping the *Error (as tensor math does).
func (z *ZeRO) Step() {
	type hidden struct{ p, g *torch.Tensor }
	var others []hidden
	torch.Tidy(func() {
		for _, p := range z.params {
			if z.owner[p.T] == z.g.rank {
				continue
			}
			if gr := p.T.Grad(); gr != nil {
				others = append(others, hidden{p.T, gr.Keep()})
				p.T.SetGrad(nil)
			}
		}
	})
	defer func() {
		for _, h := range others {
			h.p.SetGrad(h.g)
			h.g.Free()
		}
	}()
	z.inner.Step()
	for r, ps := range z.byRank {
		if err := z.g.BroadcastCoalesced(r, z.bucketBytes, ps...); err != nil {
			panic(torch.WrapError("ZeRO.Step", err))
		}
	}
}

// ZeroGrad sets every parameter's gradient to none.
func (z *ZeRO) ZeroGrad() { z.inner.ZeroGrad() }

// Groups returns the wrapped optimizer's groups (every parameter).
func (z *ZeRO) Groups() []*nn.Group { return z.inner.Groups() }

// Kind returns the wrapped optimizer's PyTorch class name (nn.KindOf).
func (z *ZeRO) Kind() string { return nn.KindOf(z.inner) }

// Parameters returns every parameter (GradScaler unscales all gradients,
// clipping sees all).
func (z *ZeRO) Parameters() []*torch.Tensor { return z.inner.Parameters() }

// State returns the whole state on rank 0 between GatherState and its
// release; otherwise this rank's part.
func (z *ZeRO) State() torch.StateDict {
	if z.gathered != nil {
		return z.gathered
	}
	return z.inner.State()
}

// LoadState takes a whole state (a checkpoint's, written with any number
// of ranks, or an unsharded optimizer's) and keeps this rank's part.
func (z *ZeRO) LoadState(sd map[string]*torch.Tensor) error {
	mine := map[string]*torch.Tensor{}
	for k, v := range sd {
		if name, ok := stateParam(k); ok && !z.own[name] {
			if z.named(name) {
				continue // another rank's
			}
		}
		mine[k] = v
	}
	return z.inner.LoadState(mine)
}

func (z *ZeRO) named(name string) bool {
	for _, p := range z.params {
		if p.Name == name {
			return true
		}
	}
	return false
}

// stateParam returns the parameter of a "state.<param>.<buffer>" key
// (buffer names have no dots).
func stateParam(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "state.")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	return rest[:i], true
}

// Free releases the wrapped optimizer's state.
func (z *ZeRO) Free() {
	z.releaseGathered()
	z.inner.Free()
}

// stateEntry describes one state tensor a rank sends to rank 0.
type stateEntry struct {
	Name  string  `json:"n"`
	DType int     `json:"d"`
	Shape []int64 `json:"s"`
}

// GatherState collects every rank's optimizer state on rank 0 (a
// collective: every rank calls it). Until release is called, State on rank
// 0 returns the whole state in the unsharded optimizer's order.
func (z *ZeRO) GatherState() (release func(), err error) {
	z.releaseGathered()
	own := z.inner.State()
	var mine []stateEntry
	var tensors []*torch.Tensor
	for _, s := range own {
		if strings.HasPrefix(s.Name, "state.") {
			mine = append(mine, stateEntry{s.Name, int(s.T.DType()), s.T.Shape()})
			tensors = append(tensors, s.T)
		}
	}
	descs, err := z.allGatherJSON(mine)
	if err != nil {
		return func() {}, err
	}
	received := map[string]*torch.Tensor{}
	var keep []*torch.Tensor
	err = torch.TidyErr(func() error {
		if z.g.rank != 0 {
			for k, t := range tensors {
				if err := z.g.Send(t.Contiguous(), 0, k); err != nil {
					return err
				}
			}
			return nil
		}
		for r := 1; r < z.g.size; r++ {
			var es []stateEntry
			if err := json.Unmarshal(descs[r], &es); err != nil {
				return fmt.Errorf("distributed: ZeRO: rank %d's state description: %w", r, err)
			}
			for k, e := range es {
				t := torch.Empty(e.Shape, torch.DType(e.DType)).Keep()
				keep = append(keep, t)
				if err := z.g.Recv(t, r, k); err != nil {
					return err
				}
				received[e.Name] = t
			}
		}
		return nil
	})
	if err != nil {
		for _, t := range keep {
			t.Free()
		}
		return func() {}, err
	}
	if z.g.rank != 0 {
		return func() {}, nil
	}
	for _, s := range own {
		if strings.HasPrefix(s.Name, "state.") {
			received[s.Name] = s.T
		}
	}
	// The unsharded order: hyperparameters, then each parameter's state.
	var out []nn.Named
	for _, s := range own {
		if !strings.HasPrefix(s.Name, "state.") {
			out = append(out, s)
		}
	}
	names := make([]string, 0, len(received))
	for n := range received {
		names = append(names, n)
	}
	pos := map[string]int{}
	for i, p := range z.params {
		pos[p.Name] = i
	}
	order := func(key string) (int, string) {
		name, _ := stateParam(key)
		return pos[name], key
	}
	sort.Slice(names, func(a, b int) bool {
		pa, ka := order(names[a])
		pb, kb := order(names[b])
		if pa != pb {
			return pa < pb
		}
		return bufRank(ka) < bufRank(kb)
	})
	for _, n := range names {
		out = append(out, nn.Named{Name: n, T: received[n]})
	}
	z.gathered = out
	z.received = keep
	return z.releaseGathered, nil
}

// bufRank orders a parameter's state as package nn lists it: step first,
// then its buffers.
func bufRank(key string) string {
	i := strings.LastIndexByte(key, '.')
	if key[i+1:] == "step" {
		return ""
	}
	return key[i+1:]
}

func (z *ZeRO) releaseGathered() {
	for _, t := range z.received {
		t.Free()
	}
	z.received, z.gathered = nil, nil
}

// allGatherJSON gathers every rank's v, JSON-encoded, on every rank.
func (z *ZeRO) allGatherJSON(v any) ([][]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, z.g.size)
	err = torch.TidyErr(func() error {
		sizes := make([]*torch.Tensor, z.g.size)
		for r := range sizes {
			sizes[r] = torch.Zeros([]int64{1}, torch.Int64)
		}
		if err := z.g.AllGather(sizes, torch.FromSlice([]int64{int64(len(b))}, nil)); err != nil {
			return err
		}
		longest := int64(1)
		for _, s := range sizes {
			longest = max(longest, s.ItemInt())
		}
		buf := make([]uint8, longest)
		copy(buf, b)
		parts := make([]*torch.Tensor, z.g.size)
		for r := range parts {
			parts[r] = torch.Zeros([]int64{longest}, torch.Uint8)
		}
		if err := z.g.AllGather(parts, torch.FromSlice(buf, nil)); err != nil {
			return err
		}
		for r, p := range parts {
			out[r] = torch.ToSlice[uint8](p)[:sizes[r].ItemInt()]
		}
		return nil
	})
	return out, err
}
