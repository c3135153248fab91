// Package tts is torchfit's XTTS-style text-to-speech recipe, at a size
// that trains on a CPU: `torchfit tts data|train-codec|train|say|eval|
// memory-test`, with the seed's (MyXTTS's) controls — config.yaml's
// training/data/model keys, micro-batch 4 × accumulation 8,
// --auto-batch (the seed's find_optimal_batch_size), gradient
// checkpointing, a memory cap, and the memory test of
// test_memory_optimization.py.
//
// # The model
//
// XTTS is a GPT over discrete audio codes conditioned on text and on
// speaker latents from a reference clip. This package has that shape:
//
//   - Codec: a VQ-VAE over normalised 80-bin log-mels (16 kHz, hop 256):
//     convolutions down by Down = 2 frames per code, a codebook of 512
//     vectors (straight-through, commitment loss, codes unused for a while
//     restarted from encoder outputs), convolutions back up. XTTS's DVAE
//     plays this part; `tts train-codec` trains it on mel crops.
//   - GPT: a causal pre-norm transformer (per-block activation
//     checkpointing through torch.Recompute when
//     model.enable_gradient_checkpointing is set) over [speaker latents |
//     text start, phonemes, text stop | audio start, codes, audio stop],
//     with separate text and audio embeddings, positions and heads. The
//     positions are learned, but start as sinusoids with the codes' at the
//     training split's codes-per-phoneme rate (GPTConfig.AlignedPositions,
//     --aligned-positions), so that attention starts near the monotonic
//     alignment XTTS's GPT has to find from learned positions alone. The
//     latents come from CondEncoder (convolutions, a transformer layer and
//     learned queries attending to the reference frames: XTTS's
//     conditioning encoder and perceiver resampler, shrunk). The loss is
//     XTTS's 0.01 × text CE + 1 × code CE, written as a sum over code
//     targets so accumulation over micro-batches of any size gives the
//     whole batch's gradient (Model.Loss). `tts train` trains it with the
//     codec frozen and its codes computed under no-grad.
//   - Synthesis (Say): espeak-ng phonemes of the text and the latents of
//     the reference clip form the prompt; codes are sampled one at a time
//     (temperature, top-k, top-p: XTTS's 0.75, 50, 0.85) with each block's
//     keys and values cached, until the audio stop token; the codec
//     decodes them to log-mels, which Mel.Magnitude inverts to a linear
//     spectrogram (non-negative least squares through the filterbank) and
//     Griffin-Lim (torchaudio's, momentum 0.99) turns into a 16 kHz WAV.
//     XTTS's HiFi-GAN decoder is the part left out: a vocoder worth having
//     needs more compute than the recipe's budget, and Griffin-Lim's loss
//     is measured (eval's "Griffin-Lim of original mels" column).
//
// # Data
//
// `tts data` runs the ASR recipe's corpus synthesis (package speech:
// several espeak-ng voices reading Konkani Devanagari sentences) without
// added noise, holds one voice (DefaultHeldOutVoice, mr+f4) out of the
// training and validation splits (it reads half of the test split: the
// unseen speaker), keeps the test split's sentences out of training (the
// ASR corpus's sentence split), phonemises every sentence and caches every
// utterance's log-mels (features.json, mels.f32; read through a memory map
// with data.enable_memory_mapping, or with a positioned read each).
//
// Text tokens are espeak-ng's phonemes (its -x mnemonics for the Marathi
// voice, one token each, "_" between words), not characters: Devanagari
// spelling is not pronunciation (the inherent vowel is dropped at word
// ends and in clusters, nasal signs vary), and a model this size cannot
// learn those rules from a few thousand sentences; the voices being
// espeak-ng's own, its phonemes are exactly what they pronounce, so the GPT
// only has to learn how long and in which voice.
//
// # Measuring it
//
// Evaluate (`tts eval`) is intelligibility: it synthesises the test split's
// sentences with seen voices (a training clip of the same voice as
// reference) and with the unseen voice (another of its clips), transcribes
// them with an ASR checkpoint trained on the same corpus (`torchfit asr
// train --data DIR --preset minimal`), and reports CER against the texts
// next to the ceiling (the ASR model on the original recordings), the
// Griffin-Lim and codec losses, and mel L1 (after dynamic time warping for
// the synthesis). The ASR model is the Transcriber EvalConfig and Recipe
// are given (the command line's is asr.TranscribeFiles): this package does
// not import the ASR recipe. RunMemoryTest (`tts memory-test`) trains at
// each micro-batch for a duration without out-of-memory adaptation and
// tabulates peak and reserved memory, step time, samples/s and OOM;
// training itself keeps the core's adaptation (an OOM halves the
// micro-batch at the same effective batch).
//
// Entry points that compute run on torch.Main(), libtorch's thread.
package tts
