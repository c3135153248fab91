package torch

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// runGoroutines runs fn(g) on n goroutines and returns the first failure.
func runGoroutines(n int, fn func(g int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			if err := Try(func() {
				if err := fn(g); err != nil {
					errs <- err
				}
			}); err != nil {
				errs <- err
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestGradModeIsPerGoroutine: grad mode is libtorch thread-local state; the
// goroutines that turn it off must never leak that to others sharing (or
// later reusing) their OS threads.
func TestGradModeIsPerGoroutine(t *testing.T) {
	settle()
	live := LiveTensors()
	w := FromSlice([]float32{1, 2, 3, 4}, nil, RequiresGrad)
	defer w.Free()
	const iters = 300
	err := runGoroutines(16, func(g int) error {
		for i := 0; i < iters; i++ {
			var bad error
			if g%2 == 0 {
				NoGrad(func() {
					Tidy(func() {
						y := w.MulScalar(2)
						runtime.Gosched()
						z := y.Add(w)
						if y.RequiresGrad() || z.RequiresGrad() || GradEnabled() {
							bad = fmt.Errorf("goroutine %d iter %d: grad recorded inside NoGrad", g, i)
						}
					})
				})
			} else {
				Tidy(func() {
					y := w.MulScalar(2)
					runtime.Gosched()
					z := y.Add(w)
					if !y.RequiresGrad() || !z.RequiresGrad() {
						bad = fmt.Errorf("goroutine %d iter %d: grad not recorded outside NoGrad", g, i)
					}
				})
			}
			if bad != nil {
				return bad
			}
			runtime.Gosched()
		}
		return nil
	})
	require.NoError(t, err)
	require.Nil(t, w.Grad())
	require.Equal(t, live+1, LiveTensors())
}

func TestNestedGradModes(t *testing.T) {
	settle()
	live := LiveTensors()
	w := FromSlice([]float32{1, 2}, nil, RequiresGrad)
	defer w.Free()
	err := runGoroutines(16, func(g int) error {
		for i := 0; i < 200; i++ {
			var bad error
			check := func(where string, want bool) {
				Tidy(func() {
					runtime.Gosched()
					if got := w.Exp().RequiresGrad(); got != want && bad == nil {
						bad = fmt.Errorf("goroutine %d iter %d %s: requires grad %v, want %v", g, i, where, got, want)
					}
				})
			}
			switch g % 4 {
			case 0:
				NoGrad(func() {
					check("NoGrad", false)
					EnableGrad(func() {
						check("NoGrad/EnableGrad", true)
						NoGrad(func() { check("NoGrad/EnableGrad/NoGrad", false) })
						check("NoGrad/EnableGrad after", true)
					})
					check("NoGrad after", false)
				})
			case 1:
				EnableGrad(func() { check("EnableGrad", true) })
			case 2:
				InferenceMode(func() {
					check("InferenceMode", false)
					Tidy(func() {
						if w.MulScalar(3).RequiresGrad() && bad == nil {
							bad = fmt.Errorf("InferenceMode recorded grad")
						}
					})
				})
			case 3:
				NoGrad(func() {
					InferenceMode(func() { check("NoGrad/InferenceMode", false) })
					check("NoGrad after InferenceMode", false)
				})
			}
			check("outside", true)
			if bad != nil {
				return bad
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, live+1, LiveTensors())

	// Modes are restored after a panic too.
	func() {
		defer func() { _ = recover() }()
		NoGrad(func() { panic("x") })
	}()
	Tidy(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.True(t, GradEnabled())
		require.True(t, w.Exp().RequiresGrad())
	})
}

// TestTrainingLoopMemoryIsFlat: 2,000 forward/backward/SGD steps of a small
// MLP, each in Tidy, leave the live tensor count and the allocated bytes
// exactly where they were after warm-up.
func TestTrainingLoopMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 training steps")
	}
	settle()
	live0 := LiveTensors()
	base := MustMemoryStats(CPU)
	ManualSeed(1)
	x := Randn([]int64{32, 16})
	y := Randint(0, 4, []int64{32})
	init := func(shape ...int64) *Tensor {
		return TidyTensor(func() *Tensor { return Randn(shape).MulScalar(0.2) }).SetRequiresGrad(true)
	}
	w1, b1 := init(32, 16), Zeros([]int64{32}, RequiresGrad)
	w2, b2 := init(4, 32), Zeros([]int64{4}, RequiresGrad)
	params := []*Tensor{w1, b1, w2, b2}
	defer func() {
		for _, p := range append(params, x, y) {
			p.Free()
		}
	}()
	const lr = 0.1
	step := func() float64 {
		var loss float64
		Tidy(func() {
			h := Linear(x, w1, b1).Relu()
			out := Linear(h, w2, b2)
			l := CrossEntropy(out, y, nil, ReduceMean, -100, 0)
			l.Backward()
			loss = l.Item()
			NoGrad(func() {
				for _, p := range params {
					p.SubIn(p.Grad(), lr)
					p.SetGrad(nil)
				}
			})
		})
		return loss
	}
	var liveAt10 int64
	var allocAt10 int64
	first := 0.0
	var last float64
	for i := 1; i <= 2000; i++ {
		last = step()
		if i == 1 {
			first = last
		}
		if i == 10 {
			liveAt10 = LiveTensors()
			allocAt10 = MustMemoryStats(CPU).Allocated
		}
		if i > 10 && i%250 == 0 {
			require.Equal(t, liveAt10, LiveTensors(), "live tensors at step %d", i)
			require.Equal(t, allocAt10, MustMemoryStats(CPU).Allocated, "allocated bytes at step %d", i)
		}
	}
	require.Less(t, last, first/2, "the MLP trains")
	require.Equal(t, liveAt10, LiveTensors())
	require.Equal(t, allocAt10, MustMemoryStats(CPU).Allocated)
	// Parameters and data: (32·16 + 32 + 4·32 + 4 + 32·16) float32 + 32 int64.
	require.EqualValues(t, base.Allocated+4*(32*16+32+4*32+4+32*16)+8*32, allocAt10)
	require.Equal(t, live0+6, liveAt10)
}
