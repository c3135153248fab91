package torch

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// settle runs pending finalizers so counters are not disturbed by tensors
// another test dropped without Free.
func settle() {
	runtime.GC()
	runtime.GC()
}

func TestTidyFreesAllButKept(t *testing.T) {
	settle()
	live := LiveTensors()
	var a, b, sum, kept *Tensor
	var parts []*Tensor
	var vals, idx *Tensor
	Tidy(func() {
		a = Ones([]int64{2, 3})
		b = a.MulScalar(2)
		sum = a.Add(b)
		kept = sum.MulScalar(3).Keep()
		parts = b.Chunk(3, 1)                   // list results are scoped
		vals, idx = b.MaxDim(1, false)          // tuple results are scoped
		require.Equal(t, live+9, LiveTensors()) // a b sum kept, 3 chunks, vals idx
	})
	for _, x := range append([]*Tensor{a, b, sum, vals, idx}, parts...) {
		require.True(t, x.Freed())
	}
	require.False(t, kept.Freed())
	require.Equal(t, []float32{9, 9, 9, 9, 9, 9}, kept.Float32s())
	require.Equal(t, live+1, LiveTensors())
	kept.Free()
	kept.Free() // idempotent
	require.Equal(t, live, LiveTensors())
}

func TestTidyScopesGradsAndRefs(t *testing.T) {
	settle()
	live := LiveTensors()
	w := FromSlice([]float32{1, 2, 3}, nil, RequiresGrad)
	defer w.Free()
	Tidy(func() {
		w.MulScalar(2).Sum().Backward()
		g := w.Grad()
		require.Equal(t, []float32{2, 2, 2}, g.Float32s())
		_ = w.Ref()
		_ = Gradients([]*Tensor{w.Square().Sum()}, []*Tensor{w}, nil, false, false)
		w.SetGrad(nil)
	})
	require.Nil(t, w.Grad())
	require.Equal(t, live+1, LiveTensors())
}

func TestTidyNestedMovesResultToParent(t *testing.T) {
	settle()
	live := LiveTensors()
	var inner, outerTmp *Tensor
	var multi []*Tensor
	Tidy(func() {
		outerTmp = Zeros([]int64{2})
		inner = TidyTensor(func() *Tensor {
			x := Ones([]int64{2})
			return x.AddScalar(1)
		})
		require.False(t, inner.Freed())
		require.Equal(t, []float32{2, 2}, inner.Float32s())
		multi = TidyTensors(func() []*Tensor {
			x := Ones([]int64{3})
			return []*Tensor{x.MulScalar(2), x.MulScalar(3)}
		})
		require.Equal(t, live+4, LiveTensors()) // outerTmp, inner, 2 in multi
	})
	require.True(t, outerTmp.Freed())
	require.True(t, inner.Freed(), "a result moved to the parent scope is freed with it")
	require.True(t, multi[0].Freed())
	require.True(t, multi[1].Freed())
	require.Equal(t, live, LiveTensors())

	// At top level, a TidyTensor result belongs to no scope.
	r := TidyTensor(func() *Tensor { return Ones([]int64{1}).AddScalar(1) })
	require.Equal(t, live+1, LiveTensors())
	Tidy(func() {})
	require.False(t, r.Freed())
	r.Free()
	require.Equal(t, live, LiveTensors())
}

func TestTidyFreesOnPanic(t *testing.T) {
	settle()
	live := LiveTensors()
	var a *Tensor
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		Tidy(func() {
			a = Ones([]int64{4})
			panic("boom")
		})
	}()
	require.True(t, a.Freed())
	require.Equal(t, live, LiveTensors())

	// A torch error inside TidyErr comes back as the error, tensors freed.
	err := TidyErr(func() error {
		a = Ones([]int64{4})
		Ones([]int64{2, 3}).Matmul(Ones([]int64{2, 3}))
		return nil
	})
	require.Error(t, err)
	require.True(t, a.Freed())
	require.Equal(t, live, LiveTensors())
}

func TestTidyIgnoresOtherGoroutines(t *testing.T) {
	settle()
	live := LiveTensors()
	var other *Tensor
	Tidy(func() {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			other = Ones([]int64{2})
		}()
		wg.Wait()
		_ = Ones([]int64{3})
	})
	require.False(t, other.Freed())
	other.Free()
	require.Equal(t, live, LiveTensors())
}

func TestAssignKeepsPointer(t *testing.T) {
	settle()
	live := LiveTensors()
	p := Zeros([]int64{2})
	q := Ones([]int64{2})
	p.Assign(q)
	require.True(t, q.Freed())
	require.Equal(t, []float32{1, 1}, p.Float32s())
	require.Equal(t, live+1, LiveTensors())
	p.Free()
	require.Equal(t, live, LiveTensors())
}

func TestFreedTensorPanicsWithErrFreed(t *testing.T) {
	a := Ones([]int64{2})
	b := Ones([]int64{2})
	defer b.Free()
	a.Free()
	require.True(t, a.Freed())
	uses := map[string]func(){
		"op":           func() { a.Add(b) },
		"other arg":    func() { b.Add(a) },
		"list arg":     func() { Cat([]*Tensor{b, a}, 0) },
		"shape":        func() { a.Shape() },
		"data":         func() { a.Float32s() },
		"item":         func() { a.Item() },
		"backward":     func() { a.Backward() },
		"grad":         func() { a.Grad() },
		"set grad arg": func() { b.SetGrad(a) },
		"in place":     func() { a.AddScalarIn(1) },
		"ref":          func() { a.Ref() },
		"assign from":  func() { Tidy(func() { b.Clone().Assign(a) }) },
	}
	for name, use := range uses {
		err := Try(use)
		require.Error(t, err, name)
		require.ErrorIs(t, err, ErrFreed, name)
		var te *Error
		require.ErrorAs(t, err, &te, name)
		require.False(t, errors.Is(err, ErrOutOfMemory), name)
	}
	// Freed tensors freed by a scope behave the same.
	var s *Tensor
	Tidy(func() { s = Ones([]int64{1}) })
	require.ErrorIs(t, Try(func() { s.Neg() }), ErrFreed)
	require.False(t, s.Defined())
	require.Equal(t, "Tensor(freed)", s.Describe())
}

func TestTryLeavesOtherPanicsAlone(t *testing.T) {
	require.NoError(t, Try(func() {}))
	require.PanicsWithValue(t, "not a torch error", func() {
		_ = Try(func() { panic("not a torch error") })
	})
	other := errors.New("plain error")
	require.PanicsWithError(t, "plain error", func() {
		_ = Try(func() { panic(other) })
	})
	err := Try(func() { throwf("Op", "bad %d", 1) })
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Equal(t, "Op", te.Op)
	require.Equal(t, "Op: bad 1", err.Error())
}

func TestCppExceptionBecomesError(t *testing.T) {
	settle()
	live := LiveTensors()
	cases := []struct {
		op string
		fn func()
	}{
		{"aten::matmul", func() { Ones([]int64{3, 4}).Matmul(Ones([]int64{3, 4})) }},
		{"aten::add", func() { Ones([]int64{3}).Add(Ones([]int64{4})) }},
		{"aten::view", func() { Ones([]int64{3, 4}).View(5, -1) }},
		{"aten::cat", func() { Cat([]*Tensor{Ones([]int64{2, 3}), Ones([]int64{2, 4})}, 0) }},
		{"aten::cross_entropy_loss", func() {
			CrossEntropy(Ones([]int64{2, 3}), FromSlice([]int64{0, 7}, nil), nil, ReduceMean, -100, 0)
		}},
		{"Backward", func() { Ones([]int64{3}).Backward() }},
	}
	for _, c := range cases {
		var err error
		Tidy(func() { err = Try(c.fn) })
		var te *Error
		require.ErrorAs(t, err, &te, c.op)
		require.Equal(t, c.op, te.Op)
		require.True(t, strings.HasPrefix(err.Error(), c.op+": "), err.Error())
		require.NotEmpty(t, te.Msg)
		for _, bad := range []string{"Exception raised from", "frame #", ".cpp:", "libtorch_cpu.so", "\n"} {
			require.NotContains(t, te.Msg, bad, "%s leaked C++ backtrace text: %q", c.op, te.Msg)
		}
		require.False(t, te.OOM)
		require.False(t, errors.Is(err, ErrOutOfMemory))
	}
	require.Equal(t, live, LiveTensors())
	// The process keeps working.
	Tidy(func() {
		x := Ones([]int64{2}).AddScalar(1)
		require.Equal(t, []float32{2, 2}, x.Float32s())
	})
}

func TestOutOfMemoryUnderLimit(t *testing.T) {
	settle()
	base := MustMemoryStats(CPU)
	live := LiveTensors()
	limit := base.Allocated + 1<<20
	require.NoError(t, SetMemoryLimit(CPU, limit))
	defer SetMemoryLimit(CPU, 0)

	small := Zeros([]int64{1000}) // fits
	var big *Tensor
	err := Try(func() { big = Zeros([]int64{1000, 1000}) })
	require.Nil(t, big)
	require.Error(t, err)
	require.ErrorIs(t, err, ErrOutOfMemory)
	var te *Error
	require.ErrorAs(t, err, &te)
	require.True(t, te.OOM)
	require.Equal(t, "aten::zeros", te.Op)
	require.EqualValues(t, 4_000_000, te.Requested)
	require.NotNil(t, te.Stats)
	require.Equal(t, limit, te.Stats.Limit)
	require.Equal(t, base.Allocated+4000, te.Stats.Allocated)
	require.GreaterOrEqual(t, te.Stats.OOMs, base.OOMs+1)
	require.NotContains(t, te.Msg, "Exception raised from")

	// An OOM for an op's output (its inputs fit) names the op; the scope
	// still frees everything.
	err = TidyErr(func() error {
		x := Ones([]int64{400, 400}) // 640,000 bytes: fits
		x.Matmul(x)                  // another 640,000: over the limit
		return nil
	})
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.ErrorAs(t, err, &te)
	require.Equal(t, "aten::matmul", te.Op)
	require.EqualValues(t, 640_000, te.Requested)

	// Afterwards the next allocation succeeds and memory returns to baseline.
	small.Free()
	require.NoError(t, SetMemoryLimit(CPU, 0))
	big = Zeros([]int64{1000, 1000})
	require.EqualValues(t, base.Allocated+4_000_000, MustMemoryStats(CPU).Allocated)
	big.Free()
	settle()
	require.Equal(t, base.Allocated, MustMemoryStats(CPU).Allocated)
	require.Equal(t, live, LiveTensors())

	require.Error(t, SetMemoryLimit(CPU, -1))
}

func TestMemoryAccountingExact(t *testing.T) {
	settle()
	base := MustMemoryStats(CPU)
	require.NoError(t, ResetPeakMemory(CPU))
	require.Equal(t, base.Allocated, MustMemoryStats(CPU).PeakAllocated)

	a := Zeros([]int64{1000, 1000})
	s := MustMemoryStats(CPU)
	require.EqualValues(t, base.Allocated+4_000_000, s.Allocated)
	require.EqualValues(t, base.Blocks+1, s.Blocks)
	require.EqualValues(t, s.Allocated, s.Reserved)
	require.EqualValues(t, base.Allocated+4_000_000, s.PeakAllocated)

	b := Zeros([]int64{500, 1000}, Float64) // 4,000,000 bytes more
	require.EqualValues(t, base.Allocated+8_000_000, MustMemoryStats(CPU).Allocated)
	b.Free()
	a.Free()
	s = MustMemoryStats(CPU)
	require.Equal(t, base.Allocated, s.Allocated)
	require.EqualValues(t, base.Allocated+8_000_000, s.PeakAllocated, "peak is the high-water mark")

	// A view shares storage: no new bytes; freeing the base keeps the data alive.
	c := Zeros([]int64{1000, 1000})
	v := c.View(-1)
	require.EqualValues(t, base.Allocated+4_000_000, MustMemoryStats(CPU).Allocated)
	c.Free()
	require.EqualValues(t, base.Allocated+4_000_000, MustMemoryStats(CPU).Allocated)
	v.Free()
	require.Equal(t, base.Allocated, MustMemoryStats(CPU).Allocated)

	require.NoError(t, ResetPeakMemory(CPU))
	s = MustMemoryStats(CPU)
	require.Equal(t, s.Allocated, s.PeakAllocated)
	d := Zeros([]int64{250, 1000})
	d.Free()
	require.EqualValues(t, base.Allocated+1_000_000, MustMemoryStats(CPU).PeakAllocated)
	require.Greater(t, MustMemoryStats(CPU).Allocations, base.Allocations)
}

// TraceMemory records each allocation and free in order with its size, as
// torch.profiler's memory events do; a trace inside a trace is refused, a
// panic in f still stops it, and TracePeak is the running sum's maximum.
func TestTraceMemory(t *testing.T) {
	settle()
	ev, err := TraceMemory(func() {
		a := Zeros([]int64{1000, 1000})  // +4,000,000
		b := Zeros([]int64{10}, Float64) // +80
		c := Zeros([]int64{1})           // +4
		b.Free()                         // −80
		a.Free()                         // −4,000,000
		c.Free()                         // −4
		_, err := TraceMemory(func() {})
		require.Error(t, err, "one trace at a time")
	})
	require.NoError(t, err)
	require.Equal(t, []int64{4_000_000, 80, 4, -80, -4_000_000, -4}, ev)
	require.EqualValues(t, 4_000_084, TracePeak(ev))
	require.Zero(t, TracePeak([]int64{-5, 3}), "peak above the start: never below it")

	func() {
		defer func() { require.NotNil(t, recover()) }()
		_, _ = TraceMemory(func() { panic("f") })
	}()
	ev, err = TraceMemory(func() { Zeros([]int64{3}).Free() })
	require.NoError(t, err, "the panic stopped the trace")
	require.Equal(t, []int64{12, -12}, ev)
}
