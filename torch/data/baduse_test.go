package data

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// A sample with no fields (a Get returning a nil Sample) is a collate
// error; it made a batch of size 0 that the loop then trained on nothing.
func TestCollateEmptySample(t *testing.T) {
	x := torch.Ones([]int64{2})
	defer x.Free()
	for _, tc := range []struct {
		name    string
		samples []Sample
	}{
		{"nil", []Sample{nil}},
		{"empty", []Sample{{}}},
		{"nil then fields", []Sample{nil, {"x": x}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, collate := range []func([]Sample) (*Batch, error){Collate, PadCollate(nil)} {
				b, err := collate(tc.samples)
				require.Error(t, err)
				require.Nil(t, b)
			}
		})
	}
	// No samples at all is a sharded rank's empty part: a batch of size 0.
	b, err := Collate(nil)
	require.NoError(t, err)
	require.Zero(t, b.Size())
}

// Absurd Workers or Prefetch are NewLoader errors; they exhausted the
// process's threads or memory (a fatal Go runtime error).
func TestNewLoaderBoundsWorkers(t *testing.T) {
	ds := DatasetFunc[Sample]{N: 4, F: func(int) (Sample, error) { return Sample{"x": torch.Ones([]int64{2})}, nil }}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"workers", Options{Workers: MaxWorkers + 1}},
		{"prefetch", Options{Workers: 1, Prefetch: MaxAhead + 1}},
		{"ahead", Options{Workers: MaxWorkers, Prefetch: MaxAhead/MaxWorkers + 1}},
		{"overflow", Options{Workers: 2, Prefetch: 1 << 62}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLoader(ds, Collate, tc.o)
			require.Error(t, err)
			require.Nil(t, l)
		})
	}
	l, err := NewLoader(ds, Collate, Options{BatchSize: 2, Workers: MaxWorkers, Prefetch: MaxAhead / MaxWorkers})
	require.NoError(t, err)
	n := 0
	for b, err := range l.Epoch(t.Context()) {
		require.NoError(t, err)
		n += b.Size()
		b.Free()
	}
	require.Equal(t, 4, n)
	require.NoError(t, l.Close())
	_, err = l.Next(t.Context())
	require.True(t, errors.Is(err, ErrClosed))
}
