// Package asr is the data half of torchfit's Konkani speech-recognition
// recipe (after the KonkaniVani ASR project): a synthetic Konkani corpus,
// WAV input, log-mel features on torch ops, a character vocabulary, greedy
// CTC decoding and CER/WER.
//
// # Text
//
// DefaultLexicon is a shipped list (lexicon.tsv, embedded) of a few hundred
// everyday Konkani words in Devanagari as written in Goa, by category:
// greetings, family, food and drink, numbers 0-100 as words, days, months,
// colours, verbs, animals, body, places (गोंय, मडगांव, पणजी, ...). It is a
// best effort, not a reviewed dictionary; corrections from Konkani speakers
// are welcome. A Composer fills sentence Templates (3-6 words) from it,
// deterministically given a seed. SentenceSplit assigns each sentence text to
// train, valid or test by a hash of the text, and Templates marked HeldOut
// are used only for test, so valid and test sentences never occur in train.
//
// # Audio
//
// Generate synthesises the corpus with espeak-ng and sox (make deps installs
// both): each sentence is spoken by a Marathi voice variant (mr, mr+f3,
// mr+m3, ...) at a random speed (-s 130-185) and pitch (-p 30-70), written
// with -w, resampled to 16 kHz mono 16-bit by sox, and a fraction get white
// noise at 15-30 dB SNR (added in Go, seeded). The Hindi voices (hi, hi+f2)
// read half of the test split and nothing else. Manifests are JSON lines:
//
//	{"id":..., "path":"wav/train/....wav", "text":"...", "duration":2.31,
//	 "voice":"mr+f2", "speaker":"mr+f2", "speed":140, "pitch":53,
//	 "snr_db":21.5, "template":"eat", "split":"train"}
//
// Why Marathi and not espeak-ng's Konkani voice: espeak-ng 1.51's kok voice
// reads Devanagari letter by letter. `espeak-ng -q -v kok -x पाणी` prints
// p,@a:k'a:rn.@ik'a:r, while `espeak-ng -q -v mr -x पाणी` prints p'a:n.i
// ("paaNi", water). Marathi shares the script and most of the phonology.
//
// Generation is resumable: file names carry a hash of text, voice, speed,
// pitch and noise, finished files are renamed into place, and a re-run only
// synthesises what is missing or invalid, then rewrites the manifests
// atomically.
//
// # Features
//
// OpenWAV streams a WAV file as 16 kHz mono float32 samples and ReadWAV
// reads a whole one: 8-bit unsigned and 16-, 24-, 32-bit signed PCM, 32- and
// 64-bit IEEE float, and WAVE_FORMAT_EXTENSIBLE with those subformats, at any
// rate from MinWAVRate to MaxWAVRate (1-384 kHz) and any number of channels.
// Channels are averaged; other rates go through Resampler, a polyphase
// Kaiser-windowed sinc (torchaudio's sinc_interp_kaiser kernel with 32 zero
// crossings, rolloff 0.945, β 10) that rejects tones above 8 kHz by at least
// 100 dB from 8.5 kHz up; the tests compare it with that kernel in PyTorch
// and with sox. The 16 kHz mono 16-bit files of the corpus decode to exactly
// v/32768, as before other formats were read. Every error about an audio
// file is an *AudioError naming it; errors about its contents (not
// RIFF/WAVE, truncated, empty, A-law and other encodings, NaN samples) also
// wrap ErrWAVFormat, and say how to convert the file with sox where that
// helps. NewFeaturizer(16000, 400, 160, 80) gives 80 log-mel bins every 10 ms:
// periodic Hann window, torch.stft power spectrum (center=True, reflect
// padding), the HTK mel filterbank of torchaudio's melscale_fbanks
// (norm=None, 0 Hz to Nyquist), ln(mel + 1e-6), then per-utterance
// mean/variance normalisation of each bin over time (population std +
// 1e-5). The tests check the filterbank and features against Python
// PyTorch. SpecAugment adds seeded time and frequency masks for training.
//
// # Tokens and scoring
//
// BuildVocab makes a character vocabulary from training text: <blank>=0 (the
// CTC blank), <pad>, <sos>, <eos>, <unk>, then every code point seen
// (consonants, independent vowels, matras, virama, anusvara, space).
// GreedyCTC and CTCCollapse decode best paths; CER and WER are Levenshtein
// rates over code points and words, ErrorRate accumulates them over a corpus.
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
// TrainConformer, MeasureStep, Evaluate and TranscribeFiles compute on
// libtorch's thread (torch.Main), whichever goroutine calls them.
package asr
