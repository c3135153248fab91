package data

import (
	"context"
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// shardIDs reads a batch's indices (an empty batch has none) and frees it.
func shardIDs(t *testing.T, b *Batch) []int {
	t.Helper()
	if b.Size() == 0 {
		b.Free()
		return []int{}
	}
	return ids(t, b)
}

// rankEpochs reads epochs of every rank's loader, in step: out[e][k][r] is
// rank r's part of batch k of epoch e.
func rankEpochs(t *testing.T, ls []*Loader[Sample, *Batch], epochs int) [][][][]int {
	t.Helper()
	var out [][][][]int
	for e := 0; e < epochs; e++ {
		var batches [][][]int
		for {
			var parts [][]int
			eof := 0
			for _, l := range ls {
				b, err := l.Next(context.Background())
				if err != nil {
					eof++
					continue
				}
				parts = append(parts, shardIDs(t, b))
			}
			require.Contains(t, []int{0, len(ls)}, eof, "every rank ends the epoch at the same batch")
			if eof > 0 {
				break
			}
			batches = append(batches, parts)
		}
		out = append(out, batches)
	}
	return out
}

// Each rank's batch is its contiguous part of the global batch one process
// with BatchSize × World would see: disjoint, together the whole, parts
// differing by at most one sample (a rank may get none of a short last
// batch), the same number of batches on every rank, with and without
// workers, over epochs.
func TestShardedLoaderSplitsTheGlobalBatch(t *testing.T) {
	for _, c := range []struct {
		n, batch, world, workers int
		dropLast                 bool
	}{
		{23, 4, 2, 0, false},
		{23, 4, 3, 2, false},
		{13, 4, 3, 0, false}, // last global batch: 1 sample for 3 ranks
		{23, 4, 3, 0, true},
		{8, 4, 1, 0, false}, // World 1: one process
	} {
		ds := indexDataset(c.n)
		one := newLoader(t, ds, Options{BatchSize: c.batch * c.world, Shuffle: true, Seed: 7, DropLast: c.dropLast})
		var ls []*Loader[Sample, *Batch]
		for r := 0; r < c.world; r++ {
			ls = append(ls, newLoader(t, ds, Options{BatchSize: c.batch, Shuffle: true, Seed: 7, DropLast: c.dropLast,
				Workers: c.workers, Shard: Shard{Rank: r, World: c.world}}))
			require.Equal(t, one.Len(), ls[r].Len())
		}
		got := rankEpochs(t, ls, 2)
		for e := 0; e < 2; e++ {
			want := epoch(t, one)
			require.Len(t, got[e], len(want), "%+v epoch %d", c, e)
			for k, parts := range got[e] {
				var joined []int
				sizes := []int{}
				for _, p := range parts {
					joined = append(joined, p...)
					sizes = append(sizes, len(p))
				}
				require.Equal(t, want[k], joined, "%+v epoch %d batch %d", c, e, k)
				require.LessOrEqual(t, slices.Max(sizes)-slices.Min(sizes), 1)
			}
		}
	}
}

// A sharded run resumes from its State with the same number of ranks at
// the same batch, and with another number of ranks at the same sample of
// the epoch's order: nothing skipped, nothing repeated.
func TestShardedLoaderResumes(t *testing.T) {
	ds := indexDataset(29)
	opts := func(world, rank int, st *State) Options {
		return Options{BatchSize: 3, Shuffle: true, Seed: 3, Shard: Shard{Rank: rank, World: world}, Resume: st}
	}
	loaders := func(world int, st *State) []*Loader[Sample, *Batch] {
		var ls []*Loader[Sample, *Batch]
		for r := 0; r < world; r++ {
			ls = append(ls, newLoader(t, ds, opts(world, r, st)))
		}
		return ls
	}
	flat := func(batches [][][]int) []int {
		var out []int
		for _, parts := range batches {
			for _, p := range parts {
				out = append(out, p...)
			}
		}
		return out
	}
	order := newLoader(t, ds, Options{BatchSize: 29, Shuffle: true, Seed: 3}).Permutation(0)

	// Two ranks take two batches (12 samples), then stop.
	ls := loaders(2, nil)
	for k := 0; k < 2; k++ {
		for _, l := range ls {
			b, err := l.Next(context.Background())
			require.NoError(t, err)
			b.Free()
		}
	}
	st := ls[0].State()
	require.Equal(t, State{Epoch: 0, Batch: 2, Seed: 3, Samples: 12, World: 2}, st)
	require.Equal(t, st, ls[1].State())

	for _, world := range []int{2, 3, 1, 4} {
		rest := rankEpochs(t, loaders(world, &st), 2)
		require.Equal(t, order[12:], flat(rest[0]), "resumed on %d ranks", world)
		// The next epoch is a whole one again.
		require.Equal(t, newLoader(t, ds, Options{BatchSize: 29, Shuffle: true, Seed: 3}).Permutation(1), flat(rest[1]))
	}
	// A one-process position (no Samples) resumed on 3 ranks: taken at the
	// same global batch (9 = 3 × 3), batch 2 starts at sample 18.
	rest := rankEpochs(t, loaders(3, &State{Epoch: 0, Batch: 2, Seed: 3}), 1)
	require.Equal(t, order[18:], flat(rest[0]))

	_, err := NewLoader(ds, Collate, Options{BatchSize: 3, Shard: Shard{Rank: 2, World: 2}})
	require.Error(t, err)
}

// A one-process run resumed with another batch size (a position in
// samples) continues at the same sample of the epoch's order, and a
// position taken inside that epoch says so in samples: a second resume
// continues where the first stopped.
func TestLoaderResumesAtAnotherBatchSize(t *testing.T) {
	ds := indexDataset(29)
	order := newLoader(t, ds, Options{BatchSize: 29, Shuffle: true, Seed: 3}).Permutation(0)
	ids := func(l *Loader[Sample, *Batch], n int) []int {
		var out []int
		for k := 0; k < n; k++ {
			b, err := l.Next(context.Background())
			require.NoError(t, err)
			out = append(out, shardIDs(t, b)...)
			b.Free()
		}
		return out
	}
	// Batches of 4: two of them, then a stop at sample 8.
	l := newLoader(t, ds, Options{BatchSize: 4, Shuffle: true, Seed: 3})
	require.Equal(t, order[:8], ids(l, 2))
	st := l.State()
	require.Equal(t, State{Epoch: 0, Batch: 2, Seed: 3}, st, "an unrebased position stays in batches")
	// Resumed with batches of 3: sample 8 onwards (batch 2 of 9 in this
	// epoch: it counts from sample 2, before which no batch of 3 fits).
	st.Samples, st.World = 8, 1
	l = newLoader(t, ds, Options{BatchSize: 3, Shuffle: true, Seed: 3, DropLast: true, Resume: &st})
	require.Equal(t, 9, l.Len())
	require.Equal(t, order[8:14], ids(l, 2))
	st = l.State()
	require.Equal(t, State{Epoch: 0, Batch: 4, Seed: 3, Samples: 14, World: 1}, st)
	// Resumed again with batches of 5: sample 14 onwards.
	l = newLoader(t, ds, Options{BatchSize: 5, Shuffle: true, Seed: 3, Resume: &st})
	require.Equal(t, order[14:29], ids(l, 3))
	_, err := l.Next(context.Background())
	require.ErrorIs(t, err, io.EOF)
	b, err := l.Next(context.Background())
	require.NoError(t, err, "the next epoch is a whole one")
	require.Len(t, shardIDs(t, b), 5)
	b.Free()
}
