// Package speech is the synthetic Konkani speech corpus that the ASR and
// TTS recipes (packages asr and tts) train on: its sentences, its audio,
// its manifests and splits, and the error rates that score speech
// recognition on it.
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
// with -w, resampled to 16 kHz (SampleRate) mono 16-bit by sox, and a
// fraction get white noise at 15-30 dB SNR (added in Go, seeded). The Hindi
// voices (hi, hi+f2) read half of the test split and nothing else.
// Manifests are JSON lines (WriteManifest, ReadManifest; one Utterance
// each):
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
// # Scoring
//
// CER and WER are Levenshtein rates (EditDistance) over code points and
// words; ErrorRate accumulates them over a corpus: total edits over total
// reference length.
package speech
