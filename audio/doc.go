// Package audio reads and writes WAV files, resamples, and computes mel
// spectrograms: the audio front end the speech and music recipes share.
//
// # WAV files
//
// OpenWAV streams a WAV file as mono float32 samples at a rate the caller
// chooses, and ReadWAV reads a whole one. They decode 8-bit unsigned and
// 16-, 24- and 32-bit signed PCM, 32- and 64-bit IEEE float, and
// WAVE_FORMAT_EXTENSIBLE with those subformats, at any rate from MinRate
// to MaxRate and with any number of channels. Channels are averaged. PCM
// is scaled by 2^(bits−1) of its container, so a mono 16-bit file at the
// rate asked for decodes to exactly v/32768. Sizes a streaming writer left
// as 0xFFFFFFFF, or larger than the file, are clamped to the bytes present.
// ReadWAVInt16 returns the raw samples of a mono 16-bit PCM file, and
// ReadWAVInfo a header without the samples.
//
// EncodeWAV and WriteWAV write mono 16-bit PCM; WriteWAV replaces the file
// atomically. FloatToInt16 rounds and clips float samples for them.
//
// Every error about a file is an *Error naming it. Errors about its
// contents (not RIFF/WAVE, a truncated header, no samples, an encoding
// other than those above, non-finite float samples) also wrap ErrFormat,
// and their messages say how to convert the file with sox where that
// helps. *Error has a UserError method: a command line treats it as bad
// input.
//
// # Resampling
//
// A Resampler converts between two rates in polyphase form with
// torchaudio's sinc_interp_kaiser kernel (32 zero crossings, rolloff
// 0.945, Kaiser β 10) and its output length, ⌈N·to/from⌉ for N input
// samples; Resample converts a whole signal. The cutoff lies below the
// lower Nyquist frequency: tones above the output's Nyquist frequency are
// removed, not aliased (from 48 kHz to 16 kHz, at least 100 dB down from
// 8.5 kHz). A Resampler streams: its output does not depend on how the
// input is split between calls to Write. OpenWAV resamples through one.
//
// # Mel spectrograms
//
// A MelSpectrogram computes mel power spectrograms with torch ops: the
// squared magnitude of torch.stft with a periodic Hann window (center=True,
// reflect padding), times a triangular filterbank. MelConfig chooses the
// filterbank: the HTK or Slaney mel scale (MelScale), peak-1 or unit-area
// triangles (MelNorm), the band, and whether spectrograms are (frames,
// mels) as torchaudio computes them or (mels, frames) as librosa does.
// MelFilterbank returns the filterbank itself. LogOffset, LogClamped and
// PowerToDB compress mel power: ln(mel + ε), ln(max(mel, floor)), and
// librosa's power_to_db relative to the maximum with a floor top_db below
// it.
//
// The tests compare the decoder with sox, the resampler with torchaudio's
// kernel written out in PyTorch, and the filterbanks with torchaudio's and
// librosa's definitions.
package audio
