package audio

import (
	"fmt"
	"math"
)

// The resampling filter: a Kaiser-windowed sinc, the kernel of
// torchaudio.functional.resample(x, from, to, lowpass_filter_width=32,
// rolloff=0.945, resampling_method="sinc_interp_kaiser", beta=10).
// Measured from 48 kHz to 16 kHz: −0.0 dB at 7 kHz, −4.5 dB at 7.5 kHz,
// −42 dB at 8.1 kHz, at least −100 dB from 8.5 kHz up. (torchaudio's
// default, a Hann window of width 6 and rolloff 0.99, passes an 8.5 kHz tone
// at −11 dB, aliased to 7.5 kHz.)
const (
	resampleWidth   = 32    // zero crossings of the sinc on each side
	resampleRolloff = 0.945 // cutoff as a fraction of the lower Nyquist frequency
	resampleBeta    = 10.0  // Kaiser window β
)

// maxResampleTaps bounds a Resampler's tables (float32 taps): 16 MiB. The
// tables hold about 68 × max(from, to)/gcd(from, to) taps, so of the
// rates converted to 16 kHz only those that share almost no factor with it
// and exceed about 61 kHz (96001 Hz, say) are refused.
const maxResampleTaps = 4 << 20

// Resampler is a streaming band-limited resampler in polyphase form. With
// the rates reduced by their gcd to orig and new, output sample m is
//
//	y[m] = Σ_s x[s] · (base/orig) · sinc(t) · I0(β√(1 − (t/32)²))/I0(β),  t = (s/orig − m/new)·base, |t| < 32
//
// with base = 0.945·min(orig, new), β = 10 and samples outside the input
// taken as 0: torchaudio's sinc_interp_kaiser kernel, and the same output
// length, ⌈new·N/orig⌉ for N input samples. The cutoff lies below the lower
// Nyquist frequency, so tones above the output's Nyquist are removed, not
// aliased. It keeps one table of taps per output phase (new tables of about
// 68·max(1, orig/new) taps: 120 KB for 44.1 kHz → 16 kHz) and the input
// samples that the outputs still to come need.
type Resampler struct {
	orig, new int64
	first     []int64     // per phase: offset of the first tap from i·orig
	taps      [][]float32 // per phase
	buf       []float32   // input samples base, base+1, ...
	base      int64
	nIn       int64 // input samples written
	m         int64 // next output sample
	flushed   bool
	total     int64 // output length, known once flushed
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// besselI0 is the modified Bessel function of the first kind, order 0.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; k < 500; k++ {
		term *= (x / 2) * (x / 2) / float64(k*k)
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return sum
}

// NewResampler returns a resampler from one positive rate to another, or
// an error when its tables would exceed 16 MiB.
func NewResampler(from, to int) (*Resampler, error) {
	if from <= 0 || to <= 0 {
		return nil, fmt.Errorf("resample %d Hz to %d Hz: rates must be positive", from, to)
	}
	g := gcd(int64(from), int64(to))
	orig, nw := int64(from)/g, int64(to)/g
	base := float64(min(orig, nw)) * resampleRolloff
	width := int64(math.Ceil(resampleWidth * float64(orig) / base))
	if est := nw * (2*width + 1); est > maxResampleTaps {
		return nil, fmt.Errorf("resampling %d Hz to %d Hz (ratio %d/%d) needs %d MiB of filter tables, more than %d",
			from, to, orig, nw, est*4>>20, maxResampleTaps*4>>20)
	}
	k := base / float64(orig*nw) // t = (s·new − j·orig)·k, exact integer numerator
	scale := base / float64(orig)
	i0b := besselI0(resampleBeta)
	r := &Resampler{orig: orig, new: nw, first: make([]int64, nw), taps: make([][]float32, nw)}
	for j := int64(0); j < nw; j++ {
		var taps []float32
		first := int64(0)
		c := j * orig / nw // the phase's centre, ⌊j·orig/new⌋
		for s := max(-width, c-width-1); s < min(width+orig, c+width+2); s++ {
			t := float64(s*nw-j*orig) * k
			if math.Abs(t) >= resampleWidth {
				continue // the window is 0 there
			}
			if taps == nil {
				first = s
			}
			u := t / resampleWidth
			win := besselI0(resampleBeta*math.Sqrt(1-u*u)) / i0b
			sinc := 1.0
			if t != 0 {
				sinc = math.Sin(math.Pi*t) / (math.Pi * t)
			}
			taps = append(taps, float32(sinc*win*scale))
		}
		r.first[j], r.taps[j] = first, taps
	}
	return r, nil
}

// OutputLen is the number of output samples for n input samples.
func (r *Resampler) OutputLen(n int) int {
	return int((r.new*int64(n) + r.orig - 1) / r.orig)
}

// start is the index of the first input sample output m needs; it never
// decreases with m (the tap range is a threshold on an exact integer).
func (r *Resampler) start(m int64) int64 { return m/r.new*r.orig + r.first[m%r.new] }

// Write appends input samples (not after Flush), first dropping those no
// output still to come needs.
func (r *Resampler) Write(x []float32) {
	if r.flushed {
		panic("audio: Resampler.Write after Flush")
	}
	if drop := min(r.start(r.m)-r.base, int64(len(r.buf))); drop > 0 {
		n := copy(r.buf, r.buf[drop:])
		r.buf = r.buf[:n]
		r.base += drop
	}
	r.buf = append(r.buf, x...)
	r.nIn += int64(len(x))
}

// Flush marks the end of the input: Drain then yields the outputs that
// need samples past the end (taken as 0).
func (r *Resampler) Flush() {
	if !r.flushed {
		r.flushed = true
		r.total = int64(r.OutputLen(int(r.nIn)))
	}
}

// Drain writes the output samples the input so far determines into dst and
// returns how many.
func (r *Resampler) Drain(dst []float32) int {
	n := 0
	for n < len(dst) {
		if r.flushed && r.m >= r.total {
			break
		}
		tp := r.taps[r.m%r.new]
		lo := r.start(r.m) - r.base
		hi := lo + int64(len(tp))
		if !r.flushed && hi > int64(len(r.buf)) {
			break
		}
		k0, k1 := int64(0), int64(len(tp))
		if lo < 0 { // before the first sample
			k0 = -lo
		}
		if hi > int64(len(r.buf)) { // past the last one (flushed)
			k1 = max(k0, int64(len(r.buf))-lo)
		}
		var acc float64
		for k := k0; k < k1; k++ {
			acc += float64(tp[k]) * float64(r.buf[lo+k])
		}
		dst[n] = float32(acc)
		n++
		r.m++
	}
	return n
}

// Resample resamples a whole signal from one rate to another (x itself when
// the rates are equal).
func Resample(x []float32, from, to int) ([]float32, error) {
	if from == to {
		return x, nil
	}
	r, err := NewResampler(from, to)
	if err != nil {
		return nil, err
	}
	r.Write(x)
	r.Flush()
	out := make([]float32, r.OutputLen(len(x)))
	r.Drain(out)
	return out, nil
}
