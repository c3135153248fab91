// Package mamba is torchfit's third recipe: a Mamba language model (Gu and
// Dao, 2023) trained on the King James Bible with GPT-2's tokenizer, after
// the Mamba memory guide (the seed): its config files, --model_size,
// --vram and --training_preset, its memory estimates.
//
//   - The model (model.go): LM is mamba-ssm's MambaLMHeadModel with its
//     state-dict names (backbone.embedding, backbone.layers.N.mixer.in_proj,
//     conv1d, x_proj, dt_proj, A_log, D, out_proj, backbone.layers.N.norm,
//     backbone.norm_f, lm_head tied to the embedding), the selective scan
//     from package scan (fused by default), per-block checkpointing, and a
//     recurrent step for generation (StepLogits). HeadLoss is the LM head's
//     cross-entropy computed in chunks with its gradient made in the same
//     pass.
//   - Data (data.go): BuildData tokenises Debian's bible-kjv (or UTF-8 text
//     files) once with tiktoken's r50k_base, offline, into uint16 token files
//     memory-mapped by training (OpenTokens), with a held-out tail and a
//     unigram baseline.
//   - Settings (presets.go, cli.go): ModelSizes, VRAMPresets (the guide's
//     "Recommended Settings by GPU"), TrainingPresets; the train command
//     resolves presets, the --config file's model/vram/training sections and
//     flags; bad values are *recipes.ConfigError (exit status 2).
//   - Train (train.go) on the training core (train.New, train.Fit): AdamW
//     with the guide's betas and no decay on norms, biases, A_log, D and the
//     embedding, warm-up then cosine decay, clipping, optional optimizer
//     offload (train.NewOffload); Evaluate (eval.go): held-out nats/token and
//     bits/char; Generate (generate.go): temperature and top-k sampling from
//     each layer's recurrent state.
//   - Estimate (estimate.go): Formula, a training step's memory from the
//     shapes, next to what a dry step measures (memplan.DryRun).
//
// Recipe puts it on the command line: torchfit mamba
// data|train|eval|generate|estimate.
package mamba
