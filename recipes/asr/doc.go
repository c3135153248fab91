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
// ReadWAV accepts only 16 kHz mono 16-bit PCM; anything else is an error
// (wrapping ErrWAVFormat) that names the file and the sox command to convert
// it. NewFeaturizer(16000, 400, 160, 80) gives 80 log-mel bins every 10 ms:
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
// Corpus loads a manifest and computes (features, token ids, text) per item
// on the fly, for the torch/data Dataset adapter.
package asr
