// Package asr is the data half of torchfit's Konkani speech-recognition
// recipe (after the KonkaniVani ASR project): log-mel features on torch
// ops, a character vocabulary and greedy CTC decoding, over the synthetic
// Konkani corpus of package speech (`torchfit asr data` runs
// speech.Generate) and WAV input of package audio.
//
// # Features
//
// WAV files are read with audio.OpenWAV and audio.ReadWAV at SampleRate,
// 16 kHz: PCM and IEEE float in any common layout, at any rate from
// audio.MinRate to audio.MaxRate (resampled) and any number of channels
// (averaged); the corpus's 16 kHz mono 16-bit files decode to exactly
// v/32768. Every error about an audio file is an *audio.Error naming it.
// NewFeaturizer(16000, 400, 160, 80) gives 80 log-mel bins every 10 ms:
// an audio.MelSpectrogram (periodic Hann window, torch.stft power spectrum
// with center=True and reflect padding, the HTK mel filterbank of
// torchaudio's melscale_fbanks with norm=None, 0 Hz to Nyquist),
// ln(mel + 1e-6), then per-utterance mean/variance normalisation of each
// bin over time (population std + 1e-5). The tests check the features
// against Python PyTorch. SpecAugment adds seeded time and frequency masks
// for training.
//
// # Tokens and scoring
//
// BuildVocab makes a character vocabulary from training text: <blank>=0 (the
// CTC blank), <pad>, <sos>, <eos>, <unk>, then every code point seen
// (consonants, independent vowels, matras, virama, anusvara, space).
// GreedyCTC and CTCCollapse decode best paths; speech.ErrorRate scores
// them (CER and WER over a corpus).
//
// # Transcription
//
// TranscribeFiles and TranscribeWAV decode greedily with the CTC head.
// Audio longer than 30 s is streamed in 30 s windows overlapping by 2 s,
// each window's features and CTC frames computed on their own and the best
// paths joined at the middle of each overlap on the 40 ms frame grid, so
// tensor memory is that of one window whatever the file's length, and the
// model's positional tables (MaxLen 5000 frames, 200 s) are never exceeded.
// A file of at most 30 s is one window, decoded as before windowing. The
// recipes/asr/README.md gives the measured peaks (78.5 MiB for tiny, 187.9 MiB for
// optimized, equal for 1 and 10 minutes).
//
// Corpus loads a manifest and computes (features, token ids, text) per item
// on the fly, for the torch/data Dataset adapter. Collate pads a batch's
// frames to a multiple of FrameMultiple (32) and its token ids to a
// multiple of 8 (TrainConfig.PadMultiple changes it): the CPU backend then
// compiles and caches kernels for a few dozen shapes instead of one per
// utterance length, which is faster and keeps RSS flat (recipes/asr/README.md).
//
// # Threads
//
// Train, MeasureStep, Evaluate and TranscribeFiles compute on
// libtorch's thread (torch.Main), whichever goroutine calls them.
package asr
