// Package ganvit is torchfit's fourth recipe, after a GPU memory guide
// for a notebook that trained a conditional GAN on music spectrograms and
// a ViT genre classifier on real + GAN-made ones, and ran out of memory
// because it put every spectrogram on the GPU first. Here the data stays
// on the CPU and one batch at a time moves to the device.
//
// # Data
//
// Generate synthesises music-like clips with sox (22.05 kHz, 16-bit WAV,
// `sox -R`: deterministic from the seed) in four genres that differ in
// what a spectrogram shows (Genres): ambient (slow, sustained low-passed
// chords, a drone), folk (plucked melody and bass), rock (kick, snare,
// hi-hats, overdriven power chords) and electronic (four-on-the-floor
// kick, off-beat hi-hats, sawtooth bass in sixteenths, a square lead),
// with overlapping tempo ranges, borrowed instruments in some clips and
// background noise of a random colour in all. A manifest (clips.jsonl)
// records genre, tempo, key and split (of every 40 clips 32 train, 4
// valid, 4 test); file names carry a hash of what sox was asked, so a
// re-run synthesises only what is missing.
//
// Clips are read with audio.ReadWAV at 22.05 kHz (other rates are
// resampled, channels averaged). Mel computes log-mel spectrograms as
// librosa's defaults do (FFT 2048, hop 512, Slaney mel filterbank,
// power_to_db with ref=max, top_db=80; package audio), scaled to [−1, 1]:
// 30 s give the seed's 1292 frames. LoadSpecs keeps
// them in host memory as Go slices — outside every torch allocator, as the
// seed's numpy arrays — with two continuous conditions per clip (the
// seed's `conditions` of width 2: tempo and Brightness, the mel-axis
// spectral centroid, normalised with the training split's mean and std)
// and the genre label. Loader builds batches in worker goroutines; on CUDA
// they are pinned and moved at hand-over. Specs.OnDevice is the seed's
// mistake — every spectrogram on the device first — kept to measure it
// (--data-on-device).
//
// # Models
//
// Generator(z, conditions, genre) → (N, 1, mels, frames) and
// Discriminator(spectrogram, conditions, genre) → logit (a projection
// discriminator) use GroupNorm rather than BatchNorm, so accumulating
// micro-batches gives the large batch's gradient. GAN trains them with the
// core's parts: an Engine and an Optim per network, each accumulating over
// its own micro-batches (and halving its own on out-of-memory), and one
// GradScaler with per-optimizer state (enabled for float16); the
// generator runs under no-grad in the discriminator's pass and the
// discriminator's parameters are frozen in the generator's. The step
// equals a Python PyTorch loop bitwise (gan_test.go).
//
// ViT is torchvision's VisionTransformer with vit_b_16's state-dict names,
// so a state dict saved from torchvision.models.vit_b_16(num_classes=K)
// loads strictly and gives the same logits (vit_test.go); ViTConfigs adds
// ViT-S/16 and ViT-Ti/16 shapes and smaller CPU configurations.
// Spectrograms are resized to 3 × Image × Image (Images). Encoder blocks
// can be checkpointed (the seed's Option 4). A Schedule is the seed's
// progressive unfreezing, {epoch: [layer indices]}: the backbone starts
// frozen and listed blocks unfreeze at their epoch (counted from 0).
// Frozen parameters get no gradient and no optimizer state (AdamW's state
// is made at a parameter's first gradient), and blocks before the first
// trainable one keep no activations.
//
// # Training
//
// Train runs the seed's pipeline: the GAN, NUM_SYNTHETIC spectrograms
// generated with conditions of real training clips (Synthesize), then the
// ViT on real + synthetic; checkpoints per epoch (train/ckpt: the
// networks, optimizers, scalers, schedule, RNG, and a Meta description
// checked against bounds before any model is built), bit-exact resume from
// either stage, also mid-epoch after a --max-steps stop; a resumed run owns
// the checkpoints of its run (those the file it resumes from lists,
// unchanged since), never another run's. Presets are the seed's settings: GAN_BATCH_SIZE 24 /
// BATCH_SIZE 12 at 128 mels × 1292 frames with ViT-B/16 ("gpu"), its
// "Tuning for Your GPU" table (8gb, 12gb, 16gb, 24gb), and "cpu". The CUDA
// cache is emptied every EmptyCacheEvery iterations and after each epoch;
// Monitor writes the seed's memory lines (Allocated, Reserved, Max
// allocated) and reads them, correcting the seed: allocated ≫ reserved
// cannot happen; reserved ≫ allocated is the caching allocator's, not a
// leak; a leak is allocated growing between lines at the same point.
//
// TestMemory is the seed's test_memory_config on the recipe's own steps;
// MeasureBreakdown measures its "Memory Usage Breakdown"; Evaluate scores
// a classifier on a split and a generator per genre (classified as the
// genre asked for; brightness asked for against brightness produced).
//
// Errors a user causes — a clip that cannot be read or is too short
// (*audio.Error; a corrupt one wraps audio.ErrFormat), a missing data set
// or bad manifest (*DataError), a checkpoint of other shapes (*ShapeError,
// *recipes.CheckpointError), an unfreezing schedule naming a missing layer
// (*ScheduleError), a bad setting (*recipes.UsageError) — implement UserError: the
// command line prints one line and exits 2. test-memory's verdict that a
// configuration does not fit is an *OOMError wrapping torch's
// out-of-memory error (exit 3).
package ganvit
