package ganvit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Specs are spectrograms in host memory — Go slices, outside every torch
// allocator, as the seed's numpy arrays — with their conditions and
// genre labels. Batches are built from them (and moved to the device) one
// at a time; OnDevice instead copies all of them to the device first, the
// seed's mistake, kept to measure it.
type Specs struct {
	Shape  Shape
	Data   [][]float32 // Mels × Frames each, values in [−1, 1]
	Cond   [][CondDim]float32
	Labels []int64
	// Raw conditions before normalisation: tempo (BPM) and brightness.
	Tempo, Brightness []float64
	Clips             []Clip // nil for generated spectrograms
}

// Len is the number of spectrograms.
func (s *Specs) Len() int { return len(s.Data) }

// Bytes is what the spectrograms, conditions and labels take as float32
// and int64 tensors.
func (s *Specs) Bytes() int64 { return int64(s.Len()) * s.Shape.SampleBytes() }

// Truncate keeps the first n spectrograms.
func (s *Specs) Truncate(n int) {
	s.Data, s.Labels = s.Data[:n], s.Labels[:n]
	s.Tempo, s.Brightness = s.Tempo[:n], s.Brightness[:n]
	if s.Cond != nil {
		s.Cond = s.Cond[:n]
	}
	if s.Clips != nil {
		s.Clips = s.Clips[:n]
	}
}

// Append adds other's spectrograms (of the same shape).
func (s *Specs) Append(o *Specs) {
	s.Data = append(s.Data, o.Data...)
	s.Cond = append(s.Cond, o.Cond...)
	s.Labels = append(s.Labels, o.Labels...)
	s.Tempo = append(s.Tempo, o.Tempo...)
	s.Brightness = append(s.Brightness, o.Brightness...)
}

// Norm normalises the two conditions: (value − mean) / std, with the
// training split's statistics (stored in checkpoints).
type Norm struct {
	TempoMean, TempoStd           float64
	BrightnessMean, BrightnessStd float64
}

// NormOf returns s's condition statistics.
func NormOf(s *Specs) Norm {
	mt, st := meanStd(s.Tempo)
	mb, sb := meanStd(s.Brightness)
	return Norm{mt, st, mb, sb}
}

func meanStd(x []float64) (float64, float64) {
	var m, v float64
	for _, a := range x {
		m += a
	}
	m /= float64(max(1, len(x)))
	for _, a := range x {
		v += (a - m) * (a - m)
	}
	s := math.Sqrt(v / float64(max(1, len(x))))
	if !(s > 1e-9) {
		s = 1
	}
	return m, s
}

// Apply sets s.Cond from the raw conditions.
func (n Norm) Apply(s *Specs) {
	s.Cond = make([][CondDim]float32, s.Len())
	for i := range s.Cond {
		s.Cond[i] = n.Conditions(s.Tempo[i], s.Brightness[i])
	}
}

// Conditions normalises one clip's tempo and brightness.
func (n Norm) Conditions(tempo, brightness float64) [CondDim]float32 {
	return [CondDim]float32{float32((tempo - n.TempoMean) / n.TempoStd), float32((brightness - n.BrightnessMean) / n.BrightnessStd)}
}

// ErrClipsTooShort is wrapped by the *DataError for a data set whose
// clips (by the manifest's seconds) are shorter than the model's frames:
// the data set is made again with longer clips, --seconds 30 for the GPU
// presets.
var ErrClipsTooShort = errors.New("clips too short for the model")

// checkClipLength refuses clips that the manifest says are too short for
// frames, naming the data set and the --seconds to make it with (not the
// first clip read, as if that one were bad).
func checkClipLength(dir string, clips []Clip, frames int64) error {
	shortest := clips[0]
	for _, c := range clips {
		if c.Seconds < shortest.Seconds {
			shortest = c
		}
	}
	if shortest.Seconds <= 0 || framesFor(shortest.Seconds) >= frames {
		return nil
	}
	need := math.Ceil(secondsFor(frames))
	return &DataError{filepath.Join(dir, manifestName), fmt.Errorf("%w: clips of %g s give %d frames, the model needs %d: make the data with `torchfit ganvit data --seconds %g --out %s --overwrite`",
		ErrClipsTooShort, shortest.Seconds, framesFor(shortest.Seconds), frames, need, dir)}
}

// LoadSpecs reads the clips of a split (all splits for "") from a data
// directory and computes their spectrograms (the first shape.Frames
// frames of each clip) on the CPU, in parallel. Conditions are left for
// Norm.Apply. Clips the manifest says are too short are a *DataError
// wrapping ErrClipsTooShort; a clip that cannot be read or is shorter
// than the manifest says is an *audio.Error.
func LoadSpecs(ctx context.Context, dir, split string, shape Shape, workers int) (*Specs, error) {
	all, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	var clips []Clip
	for _, c := range all {
		if split == "" || c.Split == split {
			clips = append(clips, c)
		}
	}
	if len(clips) == 0 {
		return nil, &DataError{filepath.Join(dir, manifestName), fmt.Errorf("no clips in split %q", split)}
	}
	if err := checkClipLength(dir, clips, shape.Frames); err != nil {
		return nil, err
	}
	mel, err := NewMel(shape.Mels)
	if err != nil {
		return nil, err
	}
	defer mel.Close()
	s := &Specs{Shape: shape, Data: make([][]float32, len(clips)), Labels: make([]int64, len(clips)),
		Tempo: make([]float64, len(clips)), Brightness: make([]float64, len(clips)), Clips: clips}
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	// Reading and decoding run in parallel; the spectrograms (torch ops)
	// on the calling goroutine's libtorch thread, one clip at a time.
	type decoded struct {
		i int
		x []float32
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs, out := make(chan int), make(chan decoded, workers)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				x, err := audio.ReadWAV(filepath.Join(dir, clips[i].Path), SampleRate)
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
					return
				}
				select {
				case out <- decoded{i, x}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range clips {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()
	n := 0
	var firstErr error
	for d := range out {
		if firstErr != nil {
			continue
		}
		c := clips[d.i]
		spec, bright, err := mel.Compute(d.x, shape.Frames)
		if err != nil {
			var te *torch.Error
			if errors.As(err, &te) {
				firstErr = err
			} else {
				firstErr = &audio.Error{Path: filepath.Join(dir, c.Path), Err: err}
			}
			cancel()
			continue
		}
		s.Data[d.i], s.Brightness[d.i] = spec, bright
		s.Labels[d.i], s.Tempo[d.i] = int64(c.Label), c.Tempo
		n++
	}
	select {
	case err := <-errc:
		if firstErr == nil {
			firstErr = err
		}
	default:
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil && n < len(clips) {
		return nil, err
	}
	return s, nil
}

// specDataset serves host spectrograms as samples: a new CPU tensor per
// sample, built in the loader's workers.
type specDataset struct{ s *Specs }

func (d specDataset) Len() int { return d.s.Len() }

func (d specDataset) Get(i int) (data.Sample, error) {
	sh := d.s.Shape
	c := d.s.Cond[i]
	return data.Sample{
		"spec":  torch.FromSlice(d.s.Data[i], []int64{1, sh.Mels, sh.Frames}),
		"cond":  torch.FromSlice(c[:], []int64{CondDim}),
		"label": torch.Scalar(float64(d.s.Labels[i]), torch.Int64),
	}, nil
}

// DeviceData is the whole data set as tensors on a device: the seed's
// `torch.FloatTensor(real_spectrograms).unsqueeze(1).to(DEVICE)`.
type DeviceData struct {
	*data.TensorDataset
	Bytes int64
}

// OnDevice copies every spectrogram, condition and label to dev. Free the
// result.
func (s *Specs) OnDevice(dev torch.Device) (*DeviceData, error) {
	var fields map[string]*torch.Tensor
	var bytes int64
	err := torch.Try(func() {
		sh := s.Shape
		spec := torch.Empty([]int64{int64(s.Len()), 1, sh.Mels, sh.Frames}, dev)
		// One clip at a time through the host, as from numpy: the device
		// holds the whole set, the host one clip more.
		torch.Tidy(func() {
			for i, x := range s.Data {
				torch.Tidy(func() {
					spec.Select(0, int64(i)).CopyFrom(torch.FromSlice(x, []int64{1, sh.Mels, sh.Frames}))
				})
			}
		})
		cond := make([]float32, 0, CondDim*s.Len())
		for _, c := range s.Cond {
			cond = append(cond, c[:]...)
		}
		fields = map[string]*torch.Tensor{
			"spec":  spec.Keep(),
			"cond":  torch.FromSlice(cond, []int64{int64(s.Len()), CondDim}, dev).Keep(),
			"label": torch.FromSlice(s.Labels, []int64{int64(s.Len())}, dev).Keep(),
		}
		for _, t := range fields {
			bytes += t.NBytes()
		}
	})
	if err != nil {
		return nil, err
	}
	ds, err := data.NewTensorDataset(fields)
	if err != nil {
		for _, t := range fields {
			t.Free()
		}
		return nil, err
	}
	return &DeviceData{ds, bytes}, nil
}

// Loader batches s for training on dev: host spectrograms become CPU
// tensors in the workers, pinned on CUDA and moved at hand-over (the
// seed's pin_memory=True and `.to(DEVICE)` inside the loop). With dd set
// (--data-on-device) the batches are slices of the device copy instead.
func Loader(s *Specs, dd *DeviceData, dev torch.Device, batch int, shuffle bool, seed uint64, workers int) (*data.Loader[data.Sample, *data.Batch], error) {
	opt := data.Options{BatchSize: batch, Shuffle: shuffle, Seed: seed, Workers: workers, Prefetch: 2, Device: dev}
	if dd != nil {
		opt.Device, opt.Workers = torch.CPU, 0 // already there; device ops stay on this thread
		return data.NewLoader[data.Sample, *data.Batch](dd.TensorDataset, data.Collate, opt)
	}
	return data.NewLoader[data.Sample, *data.Batch](specDataset{s}, data.Collate, opt)
}
