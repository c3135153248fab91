package torch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPipe: each intermediate result is released once the next step has
// run; x, a step's returned input and a tensor created outside (a
// parameter) never are; the result survives into the enclosing scope.
func TestPipe(t *testing.T) {
	x := Ones([]int64{4})
	defer x.Free()
	param := Full([]int64{4}, 2)
	defer param.Free()
	var seen []*Tensor
	var out *Tensor
	Tidy(func() {
		out = Pipe(x, 5, func(i int, in *Tensor) *Tensor {
			for _, s := range seen {
				if s != in && s != param {
					require.True(t, s.Freed(), "step %d: results before its input are released", i)
				}
			}
			require.False(t, in.Freed())
			var y *Tensor
			switch i {
			case 1:
				y = in // returns its input
			case 2:
				y = param // a tensor it did not create
			default:
				y = in.AddScalar(1)
				in.MulScalar(3) // a temporary of the step: released with its scope
			}
			seen = append(seen, y)
			return y
		})
		require.False(t, out.Freed())
		require.Equal(t, []float64{4, 4, 4, 4}, out.Float64s()) // param + 1 + 1
		out.Keep()
	})
	defer out.Free()
	require.False(t, x.Freed())
	require.False(t, param.Freed())
	require.True(t, seen[0].Freed())
	require.False(t, out.Freed())
}
