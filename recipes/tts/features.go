package tts

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// The feature cache of a corpus: every utterance's log-mel frames, float32
// little-endian, one after another in melsFile, described by featuresFile
// (where each utterance starts, its frames, and the training split's
// per-bin mean and standard deviation, which every model normalises with).
const (
	melsFile     = "mels.f32"
	featuresFile = "features.json"
)

// FeatureIndex is FeaturesFile.
type FeatureIndex struct {
	SampleRate int       `json:"sample_rate"`
	NFFT       int       `json:"n_fft"`
	Hop        int       `json:"hop"`
	NMels      int       `json:"n_mels"`
	Floor      float64   `json:"floor"`
	Mean       []float32 `json:"mean"`
	Std        []float32 `json:"std"`
	// Items maps a split to its utterances, in manifest order.
	Items map[string][]FeatureItem `json:"items"`
}

// FeatureItem is one utterance's place in MelsFile.
type FeatureItem struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"` // in frames
	Frames int    `json:"frames"`
}

// BuildFeatureCache computes the log-mel frames of every utterance of the
// corpus in dir (its three manifests) and writes the cache. It returns the
// frames written.
func BuildFeatureCache(dir string) (int, error) {
	var frames int
	var err error
	torch.Main().Do(func() { frames, err = buildFeatureCache(dir) })
	return frames, err
}

func buildFeatureCache(dir string) (int, error) {
	mel, err := NewMel()
	if err != nil {
		return 0, err
	}
	defer mel.Close()
	tmp, err := atomicfile.Create(filepath.Join(dir, melsFile))
	if err != nil {
		return 0, err
	}
	defer tmp.Close()
	w := bufio.NewWriterSize(tmp, 1<<20)
	idx := FeatureIndex{SampleRate: SampleRate, NFFT: NFFT, Hop: Hop, NMels: NMels, Floor: melFloor, Items: map[string][]FeatureItem{}}
	var off int64
	sum := make([]float64, NMels)
	sq := make([]float64, NMels)
	var n float64
	for _, sp := range speech.Splits {
		utts, err := speech.ReadManifest(filepath.Join(dir, string(sp)+".jsonl"))
		if err != nil {
			tmp.Close()
			return 0, err
		}
		for _, u := range utts {
			x, err := audio.ReadWAV(filepath.Join(dir, filepath.FromSlash(u.Path)), SampleRate)
			if err != nil {
				tmp.Close()
				return 0, err
			}
			lm, err := mel.LogMel(x)
			if err != nil {
				tmp.Close()
				return 0, fmt.Errorf("%s: %w", u.ID, err)
			}
			v := lm.Float32s()
			lm.Free()
			t := len(v) / NMels
			if err := binary.Write(w, binary.LittleEndian, v); err != nil {
				tmp.Close()
				return 0, err
			}
			idx.Items[string(sp)] = append(idx.Items[string(sp)], FeatureItem{ID: u.ID, Offset: off, Frames: t})
			off += int64(t)
			if sp == speech.Train {
				for i, x := range v {
					sum[i%NMels] += float64(x)
					sq[i%NMels] += float64(x) * float64(x)
				}
				n += float64(t)
			}
		}
	}
	if n == 0 {
		tmp.Close()
		return 0, fmt.Errorf("tts: the training split of %s is empty", dir)
	}
	for i := range NMels {
		mean := sum[i] / n
		idx.Mean = append(idx.Mean, float32(mean))
		idx.Std = append(idx.Std, float32(math.Sqrt(max(sq[i]/n-mean*mean, 1e-4))))
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return 0, err
	}
	b, err := json.Marshal(idx)
	if err != nil {
		return 0, err
	}
	if err := tmp.Commit(); err != nil {
		return 0, err
	}
	return int(off), atomicfile.WriteFile(filepath.Join(dir, featuresFile), b)
}

// FeatureStore reads utterances' frames from the cache: through a read-only
// memory map of MelsFile (the seed's data.enable_memory_mapping: pages
// shared with the page cache, only those touched resident), or with a
// positioned read per utterance.
type FeatureStore struct {
	Index FeatureIndex
	f     *os.File
	mm    []byte // the mapping, when mapped
	size  int64
}

// ErrNoFeatures is a corpus directory without a feature cache.
var ErrNoFeatures = errors.New("tts: no feature cache")

// OpenFeatures opens a corpus's feature cache.
func OpenFeatures(dir string, mmap bool) (*FeatureStore, error) {
	b, err := os.ReadFile(filepath.Join(dir, featuresFile))
	if err != nil {
		return nil, fmt.Errorf("%w in %s (run `torchfit tts data --out %s`): %v", ErrNoFeatures, dir, dir, err)
	}
	s := &FeatureStore{}
	if err := json.Unmarshal(b, &s.Index); err != nil {
		return nil, fmt.Errorf("tts: %s: %w", filepath.Join(dir, featuresFile), err)
	}
	ix := s.Index
	if ix.SampleRate != SampleRate || ix.NFFT != NFFT || ix.Hop != Hop || ix.NMels != NMels || len(ix.Mean) != NMels || len(ix.Std) != NMels {
		return nil, fmt.Errorf("tts: %s was written with other settings (rate %d, n_fft %d, hop %d, %d mels): run `torchfit tts data --out %s` again",
			filepath.Join(dir, featuresFile), ix.SampleRate, ix.NFFT, ix.Hop, ix.NMels, dir)
	}
	if s.f, err = os.Open(filepath.Join(dir, melsFile)); err != nil {
		return nil, fmt.Errorf("%w in %s: %v", ErrNoFeatures, dir, err)
	}
	st, err := s.f.Stat()
	if err != nil {
		s.f.Close()
		return nil, err
	}
	s.size = st.Size()
	for sp, items := range ix.Items {
		for _, it := range items {
			if it.Frames <= 0 || it.Offset < 0 || (it.Offset+int64(it.Frames))*NMels*4 > s.size {
				s.f.Close()
				return nil, fmt.Errorf("tts: %s: %s item %s lies outside %s (%d bytes): run `torchfit tts data --out %s` again",
					featuresFile, sp, it.ID, melsFile, s.size, dir)
			}
		}
	}
	if mmap && s.size > 0 {
		if s.mm, err = syscall.Mmap(int(s.f.Fd()), 0, int(s.size), syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
			s.f.Close()
			return nil, fmt.Errorf("tts: mmap %s: %w", melsFile, err)
		}
	}
	return s, nil
}

// Mapped reports whether the store reads through a memory map.
func (s *FeatureStore) Mapped() bool { return s.mm != nil }

// Close unmaps and closes the file.
func (s *FeatureStore) Close() error {
	if s.mm != nil {
		syscall.Munmap(s.mm)
		s.mm = nil
	}
	return s.f.Close()
}

// Frames returns an item's log-mel frames, (Frames × NMels) row-major; the
// slice is the caller's.
func (s *FeatureStore) Frames(it FeatureItem) ([]float32, error) {
	n := it.Frames * NMels
	out := make([]float32, n)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), n*4)
	off := it.Offset * NMels * 4
	if s.mm != nil {
		copy(dst, s.mm[off:off+int64(n*4)])
	} else if _, err := s.f.ReadAt(dst, off); err != nil {
		return nil, fmt.Errorf("tts: read %s: %w", melsFile, err)
	}
	if !littleEndian {
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(dst[i*4:]))
		}
	}
	return out, nil
}

var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// Normalize returns (x − mean) / std per mel bin, in place.
func (ix *FeatureIndex) Normalize(frames []float32) {
	for i := range frames {
		k := i % NMels
		frames[i] = (frames[i] - ix.Mean[k]) / ix.Std[k]
	}
}
