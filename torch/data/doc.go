// Package data loads datasets in batches for training: a Dataset yields
// samples by index, a collate function turns a slice of samples into a
// batch, and a Loader runs that in worker goroutines, in order, with a
// bounded prefetch, a reproducible shuffle and a resumable position.
//
// # Datasets and batches
//
// Dataset[S] is any type with Len and Get(i) (S, error). The sample type S is
// yours: a Sample (named tensors), a struct, a file name. A collate function
// func([]S) (B, error) builds the batch; B must implement TensorBatch (list
// its tensors), which the loader needs to pin, move and release batches.
//
// For named tensors use Sample and *Batch with the ready collates:
//
//   - Collate stacks every field along a new dimension 0 (shapes must match);
//   - PadCollate pads the fields you name to the longest sample along a chosen
//     dimension before stacking, and records each sample's original length in
//     Batch.Lengths as an int64 tensor: what ASR (audio frames, token ids) and
//     TTS (phonemes, mel frames) need. The batch keeps them on the host too
//     (Batch.HostLengths; SetLengths for lengths of your own): on a GPU a
//     read of the lengths tensor would wait for the device, and Slice, which
//     trims a micro-batch to its longest sequence, reads none.
//
// StackTensors and PadSequences are the building blocks, for collates of your
// own batch types.
//
// # Loader
//
//	ld, err := data.NewLoader(ds, data.PadCollate(map[string]data.Pad{"audio": {Dim: 0}}),
//		data.Options{BatchSize: 16, Shuffle: true, Seed: 1, Workers: 2, Device: torch.CUDA(0)})
//	if err != nil { ... }
//	defer ld.Close()
//	for epoch := 0; epoch < epochs; epoch++ {
//		for b, err := range ld.Epoch(ctx) {
//			if err != nil { return err }
//			step(b)
//			b.Free()
//		}
//	}
//
// Epoch(ctx) iterates the rest of the current epoch (range-over-func,
// iter.Seq2); Next(ctx) is the same one batch at a time and returns io.EOF at
// the end of each epoch, after which the following call starts the next.
//
// Order: the batch sequence depends only on (Seed, epoch, BatchSize,
// DropLast): with Shuffle, epoch e uses the permutation drawn from a PCG
// generator seeded with (Seed, e); workers only change when a batch is built,
// never which batch comes next. Batches are delivered in order whatever the
// workers' timing.
//
// Memory: with Workers > 0 at most Workers×Prefetch batches are being built
// or waiting for the caller at any time (prefetching runs on into the next
// epoch, so epoch boundaries do not stall the caller). Data stays on the CPU in the
// workers; when Options.Device is a CUDA device, workers copy each batch into
// pinned host memory and Next moves it to the device with a non-blocking copy
// only when it hands the batch over, so the device holds the batches the
// caller holds and no more.
//
// Ownership: a batch returned by Next or Epoch belongs to the caller. Its
// tensors are in no torch.Tidy scope (not even the caller's): Free them (the
// *Batch Free method does) or Keep them as you see fit. Temporary tensors a
// worker creates in Get and collate (views, padded copies) are released when
// the batch is built: each batch is built inside torch.Tidy. Collate must
// return new tensors (not tensors the dataset keeps), since the caller frees
// them. Batches built but never delivered (Close, an error) are freed by the
// loader.
//
// Errors: an error returned by Get or collate, or a *torch.Error panic in
// them, reaches the caller from Next as a *BatchError naming the epoch, the
// batch and the dataset index that failed; the loader stops at that batch
// (State still points at it) and keeps returning that error. Other panics in
// a worker are re-raised in the caller's goroutine by Next.
//
// Resuming: State returns {Epoch, Batch, Seed}, the position of the next
// batch. Options.Resume with that state makes a new loader continue with
// exactly that batch, so a run split across a checkpoint yields the same
// batches as a straight one.
//
// Data parallel: with Options.Shard{Rank, World} each of World loaders
// (one per rank, same Seed) delivers its rank's contiguous part of each
// global batch of BatchSize × World samples of the epoch's order: the
// ranks' parts are disjoint and together are what one loader with
// BatchSize × World delivers; every rank has the same number of batches; a
// short last batch is split as evenly as it goes (a rank may get an empty
// batch: Collate and PadCollate of no samples give a batch of size 0). A
// sharded State also records the samples of the epoch delivered over all
// ranks, so a run resumes with another number of ranks at the same sample,
// none skipped or repeated.
//
// Close stops the workers, releases undelivered batches and waits for every
// goroutine the loader started; a worker inside Get finishes that call first.
package data
