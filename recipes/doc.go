// Package recipes is the harness every training recipe (recipes/asr and
// the others) stands on. A recipe supplies its model, data, loss,
// evaluation and presets, declares its train commands once (Spec) and
// implements Recipe (its verbs: data, train, eval, ...); the harness
// supplies the rest:
//
//   - the shared train settings (Common, embedded in every recipe's
//     TrainConfig) and their flags (Flags, with the recipe's Defaults):
//     micro-batch (--micro-batch, the seeds' --batch-size), accumulation,
//     precision, device, memory limit and fraction, --vram (LookupVRAM
//     reads every recipe's table), auto-batch, dry run, gradient
//     checkpointing, clipping, empty-cache cadence, checkpoint
//     directory/every/resume/overwrite, metrics file, workers, prefetch,
//     seed, threads, epochs and steps, learning rate and warmup, data
//     parallel (--zero, --bucket-mb, --allreduce-after-backward) — each
//     under its own name, its underscore spelling and the seeds' other
//     spellings (--gradient_accumulation_steps, --data_dir,
//     --mixed_precision as a bare switch, ...);
//   - config files (ApplyConfig): JSON or YAML, settings optionally grouped
//     in sections (the Mamba seed's model/vram/training, the TTS seed's
//     config.yaml), exact numbers, unknown keys are errors naming the key,
//     the command line overrides the file; a mapping under a key the
//     recipe maps to a flag is that flag's value (ganvit's
//     unfreezing_schedule: {8: [11]});
//   - a command's set-up (Prepare): threads, the front end (log lines,
//     progress bar, metrics file: package report), a context that
//     SIGINT/SIGTERM cancel, and data parallelism as the recipe's Spec
//     declares it: under a launcher (torchfit launch, torchrun: WORLD_SIZE
//     set) it joins the data-parallel group (Run.Group, package
//     distributed) and only rank 0 renders events, or refuses the launcher
//     for a recipe that trains in one process;
//   - settings that cannot apply to a run are never silently dropped
//     (Run.NotHere): a CUDA lever on the CPU (--empty-cache-every), a
//     data-parallel one in one process (--bucket-mb,
//     --allreduce-after-backward) is refused from the command line and
//     logged as unused from a --config file (one file serves several
//     machines); a command's flags it takes but cannot honour (a memory
//     test's --checkpoint-dir) are hidden, refused or logged the same way
//     (Unused and HideFlags, given to Prepare);
//   - a run's start (Begin, at the top of every recipe's Train): the
//     settings checked, the device, the precision and its reason, the one
//     memory cap (MemoryLimit or MemoryFraction, lifted by End), the seed;
//   - the training loop (Session.Fit: a train.Trainer from the shared
//     settings and train.Fit over the recipe's data, with checkpoints,
//     resume, evaluation and signals), --auto-batch's search (AutoBatch);
//   - outputs checked before they are written (CheckOutput): a command
//     never replaces a file of another kind;
//   - errors a user causes are typed (UsageError, ConfigError,
//     CheckpointError, or any error with a UserError method): a command
//     line prints one line and exits 2.
//
// Command makes a recipe a `torchfit NAME VERB` command; cmd/torchfit is the
// registry of recipes: adding a recipe touches its folder and one line
// there.
package recipes
