package torch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

func TestStateDict(t *testing.T) {
	a, b, c := torch.Zeros([]int64{1}), torch.Ones([]int64{2}), torch.Ones([]int64{3})
	sd := torch.StateDict{{Name: "w", T: a}, {Name: "b", T: b}, {Name: "w", T: c}}
	defer sd.Free()
	require.Equal(t, []string{"w", "b", "w"}, sd.Names(), "in order")
	m := sd.Map()
	require.Len(t, m, 2)
	for _, tc := range []struct {
		name string
		want *torch.Tensor
	}{{"w", c}, {"b", b}, {"none", nil}} {
		got, ok := sd.Get(tc.name)
		require.Equal(t, tc.want != nil, ok, tc.name)
		require.Same(t, tc.want, got, "Get agrees with Map: the last of a repeated name")
		require.Same(t, tc.want, m[tc.name])
	}
}
