package clip

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

func TestMirrorPairs(t *testing.T) {
	tok, err := NewTokenizer([]string{"a", "car", "facing", "left", "right"}, 16, 8)
	require.NoError(t, err)
	sample := func(seed float32, caption string) data.Sample {
		px := make([]float32, 3*2*3)
		for i := range px {
			px[i] = seed + float32(i)
		}
		return data.Sample{"image": torch.FromSlice(px, []int64{3, 2, 3}), "text": torch.FromSlice(tok.Encode(caption), nil)}
	}
	collate, err := MirrorPairs(tok)
	require.NoError(t, err)
	cases := []struct {
		name     string
		captions []string
		want     []string // the batch's captions
	}{
		{"pairs", []string{"a car facing left", "a car facing left", "a car facing right", "a car"},
			[]string{"a car facing left", "a car facing right", "a car facing right", "a car facing left"}},
		{"an odd batch keeps its last sample", []string{"a car facing right", "a car", "a car facing left"},
			[]string{"a car facing right", "a car facing left", "a car facing left"}},
		{"no direction word", []string{"a car", "a car facing left"}, []string{"a car", "a car"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			torch.Tidy(func() {
				samples := make([]data.Sample, len(c.captions))
				for i, cap := range c.captions {
					samples[i] = sample(float32(100*i), cap)
				}
				b, err := collate(samples)
				require.NoError(t, err)
				text, image := b.Fields["text"], b.Fields["image"]
				require.Equal(t, []int64{int64(len(c.captions)), 8}, text.Shape())
				require.Equal(t, []int64{int64(len(c.captions)), 3, 2, 3}, image.Shape())
				for i, want := range c.want {
					require.Equal(t, tok.Encode(want), text.Select(0, int64(i)).Int64s(), "caption %d", i)
					src := samples[i]["image"]
					if i%2 == 1 {
						src = samples[i-1]["image"].Flip(2) // the one before it, left to right
					}
					require.True(t, image.Select(0, int64(i)).Equal(src), "image %d", i)
				}
			})
		})
	}
	t.Run("a flipped row reads backwards", func(t *testing.T) {
		torch.Tidy(func() {
			b, err := collate([]data.Sample{sample(0, "a car"), sample(50, "a car")})
			require.NoError(t, err)
			row := b.Fields["image"].Select(0, 1).Select(0, 0).Select(0, 0).Float32s()
			require.Equal(t, []float32{2, 1, 0}, row)
		})
	})
	_, err = MirrorPairs(must(NewTokenizer([]string{"a", "car"}, 8, 8)))
	require.Error(t, err)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
