package tts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// A Transcriber transcribes WAV files with a speech-recognition
// checkpoint on dev, one text per file, as asr.TranscribeFiles does; with
// no files it only checks that it can read the checkpoint.
type Transcriber func(checkpoint string, files []string, dev torch.Device) ([]string, error)

// EvalConfig is `torchfit tts eval`: intelligibility and mel distance on
// held-out sentences.
type EvalConfig struct {
	Checkpoint string // from `tts train`
	ASR        string // an ASR checkpoint trained on the same corpus (`torchfit asr train --data DIR`)
	// Rank is another ASR checkpoint that picks among the candidates
	// (Sample.Candidates > 1) the one it transcribes closest to the text,
	// instead of the GPT's likeliest; never the judge (ASR).
	Rank       string
	Transcribe Transcriber // reads ASR's checkpoint: asr.TranscribeFiles (cmd/torchfit wires it in)
	Data       string
	Split      string // test: held-out sentences, half read by the held-out voice
	Limit      int    // utterances per group (seen, unseen voices); 0: all
	Out        string // the WAVs written (tts/, codec/, vocoder/, forced/ under it)
	Device     torch.Device
	Sample     SampleOptions
	GLIters    int
	Logf       func(string, ...any)
}

// EvalRow is one group's figures: CER of the ASR model on the original
// recordings (the ceiling), on Griffin-Lim from the original mels (the
// vocoder's loss), on the codec's reconstruction (the codec's), on the
// GPT's teacher-forced codes (its per-code errors alone), and on the
// synthesised speech; mel L1 (natural-log mel, per bin and frame) of
// the codec's reconstruction and, after dynamic time warping, of the
// synthesis.
type EvalRow struct {
	Group                             string
	N                                 int
	CEROriginal, CERVocoder, CERCodec float64
	CERTTS                            float64
	// CERForced is the CER of the GPT's teacher-forced codes (its
	// likeliest code at each place given the original codes before it),
	// ForcedAccuracy the fraction equal to the codec's own.
	CERForced, ForcedAccuracy float64
	MelL1Codec, MelL1TTS      float64
	Stopped                   int // syntheses the model ended itself
	// Reranked counts the syntheses where the ranker (EvalConfig.Rank)
	// chose another candidate than the GPT's likeliest.
	Reranked                            int `json:",omitempty"`
	SecondsOriginal, SecondsSynthesised float64
}

// EvalResult is what Evaluate measured.
type EvalResult struct {
	Rows     []EvalRow
	Examples []EvalExample
	Elapsed  time.Duration
}

// EvalExample is one utterance's transcripts.
type EvalExample struct {
	ID, Group, Voice, Reference, Text, Original, TTS string
	WAV                                              string
}

// Evaluate synthesises the split's sentences with seen voices (their
// reference clips from the training split) and the unseen voice (another
// sentence of that voice as reference), transcribes everything with the
// ASR model (cfg.Transcribe), and reports CER and mel L1 per group.
func Evaluate(ctx context.Context, cfg EvalConfig) (res EvalResult, err error) {
	start := time.Now()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := cfg.Sample.Validate(); err != nil {
		return res, err
	}
	if err := checkGLIters(cfg.GLIters); err != nil {
		return res, err
	}
	for _, f := range []struct{ flag, path string }{{"checkpoint", cfg.Checkpoint}, {"asr", cfg.ASR}} {
		if err := needFile(f.flag, f.path); err != nil {
			return res, err
		}
		if _, err := os.Stat(f.path); err != nil {
			return res, recipes.Usagef("--%s: %v", f.flag, err)
		}
	}
	if cfg.Transcribe == nil {
		return res, errors.New("tts: eval: no Transcriber to score the speech with (EvalConfig.Transcribe)")
	}
	if err := checkRanker(cfg.Rank, cfg.ASR, cfg.Sample.Candidates, cfg.Transcribe); err != nil {
		return res, err
	}
	if cfg.Split == "" {
		cfg.Split = "test"
	}
	// The ASR checkpoints are read before anything is synthesised or
	// written.
	for _, a := range []string{cfg.ASR, cfg.Rank} {
		if a == "" {
			continue
		}
		if _, err := cfg.Transcribe(a, nil, cfg.Device); err != nil {
			return res, err
		}
	}
	var m *Model
	torch.Main().Do(func() { m, err = LoadModel(cfg.Checkpoint, cfg.Device) })
	if err != nil {
		return res, err
	}
	defer torch.Main().Do(func() { nn.Free(m) })
	store, err := OpenFeatures(cfg.Data, false)
	if err != nil {
		return res, recipes.Usage(err)
	}
	defer store.Close()
	tr, err := LoadCorpus(cfg.Data, "train", store, m.Vocab, cfg.Sample.Seed)
	if err != nil {
		return res, err
	}
	te, err := LoadCorpus(cfg.Data, cfg.Split, store, m.Vocab, cfg.Sample.Seed)
	if err != nil {
		return res, err
	}
	if te.Len() == 0 { // an empty table would pass for a score
		return res, recipes.Usage(fmt.Errorf("tts: %s holds no utterances (%w): nothing to evaluate; make a corpus of at least %d utterances with `torchfit tts data`",
			filepath.Join(cfg.Data, cfg.Split+".jsonl"), ErrEmptySplit, minUtterances()))
	}
	groups := map[string][]int{}
	for i, u := range te.Utts {
		g := "unseen voice"
		if len(tr.BySpeaker[u.Speaker]) > 0 {
			g = "seen voices"
		}
		if cfg.Limit == 0 || len(groups[g]) < cfg.Limit {
			groups[g] = append(groups[g], i)
		}
	}
	dirs := []string{"tts", "codec", "vocoder", "forced"}
	if cfg.Rank != "" {
		dirs = append(dirs, "candidates")
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(cfg.Out, d), 0o755); err != nil {
			return res, err
		}
	}
	mel, err := NewMel()
	if err != nil {
		return res, err
	}
	defer mel.Close()
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		idx := groups[g]
		row := EvalRow{Group: g, N: len(idx)}
		var orig, voc, cod, syn, frc []string
		var hits, forcedN int
		var l1c, l1t float64
		for k, i := range idx {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			u := te.Utts[i]
			var refCorpus *Corpus
			var ri int
			if g == "seen voices" {
				te.Ref = tr
				ri, refCorpus = te.RefIndex(i), tr
			} else {
				te.Ref = nil
				ri, refCorpus = te.RefIndex(i), te
			}
			frames, err := te.Mel(i)
			if err != nil {
				return res, err
			}
			ref, err := refCorpus.Mel(ri)
			if err != nil {
				return res, err
			}
			var one evalOne
			torch.Main().Do(func() {
				err = torch.Try(func() { one = m.evalOne(mel, frames, ref, te.Text[i], cfg, uint64(i)) })
			})
			if err != nil {
				return res, err
			}
			pick := 0
			if cfg.Rank != "" {
				name := func(k int) string { return filepath.Join(cfg.Out, "candidates", fmt.Sprintf("%s_%d.wav", u.ID, k)) }
				if pick, _, err = rankByASR(cfg.Transcribe, cfg.Rank, u.Text, one.tts, name, cfg.Device); err != nil {
					return res, err
				}
				if pick > 0 {
					row.Reranked++
				}
			}
			paths := map[string][]float32{"tts": one.tts[pick], "codec": one.codec, "vocoder": one.vocoder, "forced": one.forced}
			for d, w := range paths {
				if err := audio.WriteWAV(filepath.Join(cfg.Out, d, u.ID+".wav"), audio.FloatToInt16(w), SampleRate); err != nil {
					return res, err
				}
			}
			orig = append(orig, filepath.Join(cfg.Data, filepath.FromSlash(u.Path)))
			voc = append(voc, filepath.Join(cfg.Out, "vocoder", u.ID+".wav"))
			cod = append(cod, filepath.Join(cfg.Out, "codec", u.ID+".wav"))
			syn = append(syn, filepath.Join(cfg.Out, "tts", u.ID+".wav"))
			frc = append(frc, filepath.Join(cfg.Out, "forced", u.ID+".wav"))
			hits += one.forcedHits
			forcedN += one.forcedN
			l1c += one.l1Codec
			l1t += dtwL1(one.ttsMel[pick], one.orig)
			if one.stopped[pick] {
				row.Stopped++
			}
			row.SecondsOriginal += u.Duration
			row.SecondsSynthesised += float64(len(one.tts[pick])) / SampleRate
			res.Examples = append(res.Examples, EvalExample{ID: u.ID, Group: g, Voice: u.Voice, Reference: refCorpus.Utts[ri].ID, Text: u.Text, WAV: syn[len(syn)-1]})
			if (k+1)%10 == 0 {
				cfg.Logf("%s: %d of %d synthesised", g, k+1, len(idx))
			}
		}
		row.MelL1Codec, row.MelL1TTS = l1c/float64(len(idx)), l1t/float64(len(idx))
		row.ForcedAccuracy = float64(hits) / float64(max(forcedN, 1))
		cers := make([]float64, 5)
		for j, files := range [][]string{orig, voc, cod, syn, frc} {
			texts, err := cfg.Transcribe(cfg.ASR, files, cfg.Device)
			if err != nil {
				return res, err
			}
			var er speech.ErrorRate
			for k, t := range texts {
				er.Add(te.Utts[idx[k]].Text, t)
			}
			cers[j] = er.CER()
			if j == 0 || j == 3 {
				for k, t := range texts {
					e := &res.Examples[len(res.Examples)-len(idx)+k]
					if j == 0 {
						e.Original = t
					} else {
						e.TTS = t
					}
				}
			}
		}
		row.CEROriginal, row.CERVocoder, row.CERCodec, row.CERTTS, row.CERForced = cers[0], cers[1], cers[2], cers[3], cers[4]
		res.Rows = append(res.Rows, row)
		cfg.Logf("%s: CER original %.3f, vocoder %.3f, codec %.3f, GPT teacher-forced %.3f (code accuracy %.3f), TTS %.3f", g, row.CEROriginal, row.CERVocoder, row.CERCodec,
			row.CERForced, row.ForcedAccuracy, row.CERTTS)
	}
	res.Elapsed = time.Since(start)
	b, _ := json.MarshalIndent(res, "", " ")
	if err := atomicfile.WriteFile(filepath.Join(cfg.Out, "eval.json"), b); err != nil {
		return res, err
	}
	return res, nil
}

type evalOne struct {
	codec, vocoder, forced []float32
	orig                   []float32 // the original log-mels
	// tts are the synthesised candidates' speech, ttsMel their log-mels
	// and stopped whether the GPT ended them, the GPT's likeliest first:
	// all candidates when a ranker chooses, else that one alone.
	tts, ttsMel         [][]float32
	stopped             []bool
	l1Codec             float64
	forcedHits, forcedN int // teacher-forced codes equal to the codec's, of all
}

// evalOne synthesises one utterance (normalised frames and reference
// clip) and resynthesises it through the codec and the vocoder alone.
func (m *Model) evalOne(mel *Mel, frames, ref []float32, text []int64, cfg EvalConfig, seed uint64) evalOne {
	var out evalOne
	dev := m.device()
	vocode := func(x *torch.Tensor) []float32 { return mel.vocode(x, cfg.GLIters, seed) }
	torch.Tidy(func() {
		t := int64(len(frames) / NMels)
		x := torch.FromSlice(frames, []int64{t, NMels})
		orig := m.denormalize(x)
		out.vocoder = vocode(orig)
		pad := (t+Down-1)/Down*Down - t
		xin := x.Unsqueeze(0).Pad([]int64{0, 0, 0, pad}, 0).ToDevice(dev)
		var rec, forced *torch.Tensor
		var truth []int64
		torch.NoGrad(func() {
			enc := m.Codec.Encode(xin)
			truth = enc.Narrow(1, 0, CodeLen(t)).Reshape(-1).Int64s()
			rec = m.denormalize(m.Codec.Decode(enc).Squeeze().ToDevice(torch.CPU).Narrow(0, 0, t))
		})
		out.l1Codec = rec.Sub(orig).Abs().Mean().Item()
		out.codec = vocode(rec)
		r := torch.FromSlice(ref, []int64{int64(len(ref) / NMels), NMels}).ToDevice(dev)
		so := cfg.Sample
		so.Seed = cfg.Sample.Seed ^ seed
		var cands []Candidate
		torch.NoGrad(func() {
			lat := m.Latents(r)
			tf := m.TeacherForced(lat, text, truth)
			for j, c := range tf {
				if c == truth[j] {
					out.forcedHits++
				}
			}
			out.forcedN = len(tf)
			forced = m.decodeCodes(tf)
			cands = m.Sample(lat, text, so)
		})
		if cfg.Rank == "" {
			cands = cands[:1]
		}
		for _, c := range cands {
			var syn *torch.Tensor
			torch.NoGrad(func() { syn = m.decodeCodes(c.Codes) })
			out.ttsMel = append(out.ttsMel, syn.Float32s())
			out.tts = append(out.tts, vocode(syn))
			out.stopped = append(out.stopped, c.Stopped)
		}
		out.orig = orig.Float32s()
		out.forced = vocode(forced)
	})
	return out
}

// dtwL1 is the mean per-bin L1 distance of two log-mel sequences along
// their dynamic-time-warping path (steps (1,0), (0,1), (1,1)), divided by
// the path's length.
func dtwL1(a, b []float32) float64 {
	n, m := len(a)/NMels, len(b)/NMels
	if n == 0 || m == 0 {
		return math.NaN()
	}
	dist := func(i, j int) float64 {
		var s float64
		for k := range NMels {
			s += math.Abs(float64(a[i*NMels+k] - b[j*NMels+k]))
		}
		return s / NMels
	}
	type cell struct {
		cost float64
		len  int
	}
	prev := make([]cell, m)
	cur := make([]cell, m)
	for i := range n {
		for j := range m {
			d := dist(i, j)
			switch {
			case i == 0 && j == 0:
				cur[j] = cell{d, 1}
			case i == 0:
				cur[j] = cell{cur[j-1].cost + d, cur[j-1].len + 1}
			case j == 0:
				cur[j] = cell{prev[j].cost + d, prev[j].len + 1}
			default:
				best := prev[j-1]
				if prev[j].cost < best.cost {
					best = prev[j]
				}
				if cur[j-1].cost < best.cost {
					best = cur[j-1]
				}
				cur[j] = cell{best.cost + d, best.len + 1}
			}
		}
		prev, cur = cur, prev
	}
	return prev[m-1].cost / float64(prev[m-1].len)
}

// Table writes the figures as a Markdown table.
func (r EvalResult) Table(w io.Writer) {
	fmt.Fprintln(w, "| voices | utterances | CER original | CER Griffin-Lim of original mels | CER codec resynthesis | CER GPT teacher-forced (code accuracy) | CER TTS | mel L1 codec | mel L1 TTS (DTW) | ended by the model | seconds original / TTS |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.Rows {
		fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f (%.3f) | **%.3f** | %.3f | %.3f | %d | %.1f / %.1f |\n", x.Group, x.N, x.CEROriginal, x.CERVocoder, x.CERCodec,
			x.CERForced, x.ForcedAccuracy, x.CERTTS, x.MelL1Codec, x.MelL1TTS, x.Stopped, x.SecondsOriginal, x.SecondsSynthesised)
	}
}

// Transcripts writes a few examples.
func (r EvalResult) Transcripts(w io.Writer, n int) {
	seen := map[string]int{}
	for _, e := range r.Examples {
		if seen[e.Group] >= n {
			continue
		}
		seen[e.Group]++
		fmt.Fprintf(w, "%s (%s, %s; reference %s)\n  text:           %s\n  ASR, original:  %s\n  ASR, TTS:       %s\n", e.WAV, e.Group, e.Voice, e.Reference,
			e.Text, strings.TrimSpace(e.Original), strings.TrimSpace(e.TTS))
	}
}
