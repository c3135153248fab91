// Package recipes is the harness every training recipe (recipes/asr and
// the others) stands on. A recipe supplies its model, data, loss, metrics
// and presets, and implements Recipe (its verbs: data, train, eval, ...);
// the harness supplies the rest:
//
//   - the shared train flags (Flags, with the recipe's Defaults): batch size,
//     accumulation, precision, device, memory limit and fraction, --vram,
//     auto-batch, dry run, gradient checkpointing, clipping, empty-cache
//     cadence, checkpoint directory/every/resume/overwrite, metrics file,
//     workers, prefetch, seed, threads, epochs and steps, learning rate and
//     warmup, data parallel (--zero, --bucket-mb,
//     --allreduce-after-backward) — each under its own name, its underscore spelling and the
//     seeds' other spellings (--gradient_accumulation_steps, --data_dir,
//     --mixed_precision as a bare switch, ...);
//   - config files (ApplyConfig): JSON or YAML, settings optionally grouped
//     in sections (the Mamba seed's model/vram/training, the TTS seed's
//     config.yaml), exact numbers, unknown keys are errors naming the key,
//     the command line overrides the file;
//   - a run's set-up (Prepare): threads, the device's memory cap, the front
//     end (log lines, progress bar, metrics file: package report), and a
//     context that SIGINT/SIGTERM cancel; under a launcher (torchfit
//     launch, torchrun: WORLD_SIZE set) it joins the data-parallel group
//     (Run.Group, package distributed) and only rank 0 renders events;
//   - errors a user causes are typed (UsageError, ConfigError, or any error
//     with a UserError method): a command line prints one line and exits 2.
//   - WriteFileAtomic, which replaces a file through a temporary one
//     (manifests, vocabularies, caches).
//
// Command makes a recipe a `torchfit NAME VERB` command; cmd/torchfit is the
// registry of recipes.
package recipes
