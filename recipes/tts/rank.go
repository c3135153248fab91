package tts

import (
	"fmt"
	"os"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// rankByASR writes the candidates' speech (the GPT's likeliest first) to
// the WAV files path(k) names and returns the index of the one an ASR
// model transcribes closest to text, and each candidate's CER: Tortoise's
// CLVP reranking, with a speech recogniser scoring how well the speech
// says the text. Ties go to the earlier, likelier candidate.
func rankByASR(transcribe Transcriber, checkpoint, text string, wavs [][]float32, path func(k int) string, dev torch.Device) (int, []float64, error) {
	files := make([]string, len(wavs))
	for k, w := range wavs {
		files[k] = path(k)
		if err := audio.WriteWAV(files[k], audio.FloatToInt16(w), SampleRate); err != nil {
			return 0, nil, err
		}
	}
	texts, err := transcribe(checkpoint, files, dev)
	if err != nil {
		return 0, nil, err
	}
	if len(texts) != len(files) {
		return 0, nil, fmt.Errorf("tts: the ranker transcribed %d of %d candidates", len(texts), len(files))
	}
	cers := make([]float64, len(texts))
	best := 0
	for k, t := range texts {
		var er speech.ErrorRate
		er.Add(text, t)
		cers[k] = er.CER()
		if cers[k] < cers[best] {
			best = k
		}
	}
	return best, cers, nil
}

// checkRanker checks a --rank-asr setting before anything runs: it needs
// several candidates to choose from, a transcriber, and in `tts eval`
// must not be the judge (judge: its path, or "" in `tts say`).
func checkRanker(rank, judge string, candidates int, transcribe Transcriber) error {
	if rank == "" {
		return nil
	}
	if candidates < 2 {
		return recipes.Usagef("--rank-asr ranks the candidates: it needs --candidates 2 or more")
	}
	st, err := os.Stat(rank)
	if err != nil {
		return recipes.Usagef("--rank-asr: %v", err)
	}
	if judge != "" {
		if js, err := os.Stat(judge); err == nil && os.SameFile(st, js) {
			return recipes.Usagef("--rank-asr %s is the --asr judge: a ranker must be another ASR model, or the judge grades its own choice", rank)
		}
	}
	if transcribe == nil {
		return fmt.Errorf("tts: --rank-asr: no Transcriber to rank with")
	}
	return nil
}
