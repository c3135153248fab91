package ganvit

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Meta describes a checkpoint's models and where its run stands; it is
// stored as JSON under meta.model ("recipe": "ganvit").
type Meta struct {
	Preset    string    `json:"preset"`
	GAN       GANConfig `json:"gan"`
	ViT       ViTConfig `json:"vit"`
	Norm      Norm      `json:"norm"`
	Genres    []string  `json:"genres"`
	Stage     string    `json:"stage"` // "gan" or "classifier": the stage the file was written in
	GANEpochs int       `json:"gan_epochs"`
	GANSteps  int       `json:"gan_steps"`
	Epochs    int       `json:"epochs"` // classifier epochs done
	Steps     int       `json:"steps"`
	// GANDone and Done are the examples of the next GAN or classifier
	// epoch already trained: a run stopped by --max-steps or a signal in
	// the middle of an epoch goes on from there when resumed, whatever its
	// effective batch. GANEffective and Effective are the effective
	// batches the run trained with.
	GANDone      int `json:"gan_done,omitempty"`
	Done         int `json:"done,omitempty"`
	GANEffective int `json:"gan_effective,omitempty"`
	Effective    int `json:"effective,omitempty"`
	// GANBatch and Batch are the same positions in batches, in files of
	// torchfit before GANDone and Done: read, never written.
	GANBatch     int    `json:"gan_batch,omitempty"`
	Batch        int    `json:"batch,omitempty"`
	Unfreeze     string `json:"unfreeze"`
	NumSynthetic int    `json:"num_synthetic"`
	Seed         uint64 `json:"seed"`
	// RunFiles are the run's checkpoints in its directory, in files of
	// torchfit before train.Run listed them as run_checkpoints: read when
	// resuming such a file, never written.
	RunFiles []string `json:"run_files,omitempty"`
}

// Shape is the spectrogram shape the models take.
func (m Meta) Shape() Shape { return Shape{m.GAN.Mels, m.GAN.Frames} }

func (m Meta) dict() *ptfile.Dict {
	b, _ := json.Marshal(m)
	return ptfile.NewDict("recipe", "ganvit", "model", string(b))
}

// checkpointError is a ganvit checkpoint that cannot be used (the shared
// recipes.CheckpointError: a command line exits 2).
func checkpointError(path string, err error) error {
	return &recipes.CheckpointError{Recipe: "ganvit", Path: path, Err: err}
}

// ShapeError is spectrograms whose shape is not the checkpoint's.
type ShapeError struct {
	Path       string
	Want, Have Shape
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("spectrograms of %v do not match the checkpoint %s, whose models take %v: leave out --n-mels/--frames/--preset to use the checkpoint's, or train new models",
		e.Have, e.Path, e.Want)
}

// UserError marks it as the user's input.
func (*ShapeError) UserError() {}

// readMeta returns a checkpoint file's description, checked against
// bounds (before any model is built from it).
func readMeta(f *ckpt.File) (Meta, error) {
	bad := func(format string, args ...any) (Meta, error) {
		return Meta{}, checkpointError(f.Path, fmt.Errorf(format, args...))
	}
	md := f.Meta()
	if md == nil {
		return bad("no meta: not a ganvit checkpoint")
	}
	if r, _ := md.Get("recipe"); r != "ganvit" {
		return bad("written by recipe %v, not ganvit", r)
	}
	s, _ := md.Get("model")
	str, ok := s.(string)
	if !ok {
		return bad("meta.model is not a string")
	}
	var m Meta
	dec := json.NewDecoder(strings.NewReader(str))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return bad("meta.model: %v", err)
	}
	if strings.Join(m.Genres, ",") != strings.Join(Genres, ",") {
		return bad("genres %v, this recipe's are %v", m.Genres, Genres)
	}
	if err := m.GAN.Validate(); err != nil {
		return bad("GAN: %v", err)
	}
	if m.GAN.Classes != int64(len(Genres)) {
		return bad("GAN: %d classes for %d genres", m.GAN.Classes, len(Genres))
	}
	if f.Has("classifier") {
		if err := m.ViT.Validate(); err != nil {
			return bad("%v", err)
		}
		if m.ViT.Classes != int64(len(Genres)) {
			return bad("ViT: %d classes for %d genres", m.ViT.Classes, len(Genres))
		}
	}
	if m.GANEpochs < 0 || m.GANSteps < 0 || m.Epochs < 0 || m.Steps < 0 || m.GANBatch < 0 || m.Batch < 0 {
		return bad("negative epochs, steps or batches: %+v", m)
	}
	if m.Stage != "gan" && m.Stage != "classifier" {
		return bad("stage %q", m.Stage)
	}
	if _, err := ParseSchedule(m.Unfreeze); err != nil {
		return bad("%v", err)
	}
	return m, nil
}
