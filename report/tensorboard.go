package report

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/torchfit/torchfit/train"
)

// The scalars TensorBoard.Sink writes for each optimizer step (StepEvent),
// at the step's number; each evaluation value (EvalEvent) is TagEval plus
// its name ("eval/val_loss") at the step it followed. Memory is in MiB.
const (
	TagLoss      = "train/loss"
	TagLR        = "train/lr"
	TagGradNorm  = "train/grad_norm"
	TagRate      = "train/samples_per_sec"
	TagAllocated = "memory/allocated_mib"
	TagPeak      = "memory/peak_mib"
	TagReserved  = "memory/reserved_mib"
	TagEval      = "eval/"
)

// TensorBoardFilePrefix begins the name of every event file
// (events.out.tfevents.<unix seconds>.<hostname>): TensorBoard reads the
// files of a directory whose names hold "tfevents".
const TensorBoardFilePrefix = "events.out.tfevents."

// TensorBoard writes scalars to a TensorBoard event file: TFRecord
// framing around Event protocol buffers, the format TensorFlow's and
// PyTorch's SummaryWriter write, read by `tensorboard --logdir DIR`.
// Each run (each OpenTensorBoard) writes a new file in the directory and
// leaves the files already there. Every event is written to the file at
// once, so TensorBoard shows a run as it trains. It is safe for
// concurrent use; close it when training ends.
//
// Before its first step's scalars a file has a SessionLog START event at
// that step, as TensorFlow writes when a session starts: TensorBoard
// (purge_orphaned_data, its default) then drops what earlier files of the
// directory hold from that step on, so a run resumed from a checkpoint
// older than the last step logged replaces the steps it redoes instead
// of drawing them twice.
type TensorBoard struct {
	mu      sync.Mutex
	f       *os.File
	path    string
	err     error
	started bool // the START event is written
}

// TensorBoardError is an event file that could not be created or
// written.
type TensorBoardError struct {
	Path string // the directory or the file
	Err  error
}

func (e *TensorBoardError) Error() string {
	return fmt.Sprintf("report: tensorboard %s: %v", e.Path, e.Err)
}
func (e *TensorBoardError) Unwrap() error { return e.Err }

// OpenTensorBoard creates dir when needed and a new event file in it,
// named events.out.tfevents.<unix seconds>.<hostname> (with a ".N"
// suffix when a file of that name exists: nothing is overwritten), and
// writes the file's first event (file_version "brain.Event:2").
func OpenTensorBoard(dir string) (*TensorBoard, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &TensorBoardError{Path: dir, Err: err}
	}
	now := time.Now()
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(host)
	base := filepath.Join(dir, fmt.Sprintf("%s%d.%s", TensorBoardFilePrefix, now.Unix(), host))
	var f *os.File
	for n := 0; ; n++ {
		path := base
		if n > 0 {
			path = fmt.Sprintf("%s.%d", base, n)
		}
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n == 1000 {
			return nil, &TensorBoardError{Path: path, Err: err}
		}
	}
	tb := &TensorBoard{f: f, path: f.Name()}
	if err := tb.write(Record(nil, encodeEvent(now, 0, "brain.Event:2", nil))); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return tb, nil
}

// Path is the event file's path.
func (t *TensorBoard) Path() string { return t.path }

// Sink writes StepEvents and EvalEvents as scalars (see TagLoss); values
// that are NaN or infinite (a skipped step's loss, a gradient norm not
// computed) are left out.
func (t *TensorBoard) Sink(e train.Event) {
	switch e := e.(type) {
	case train.StepEvent:
		i := e.StepInfo
		v := map[string]float64{TagLoss: i.Loss, TagLR: i.LR, TagGradNorm: i.GradNorm}
		if i.Duration > 0 {
			v[TagRate] = rate(i)
		}
		if m := i.Memory; m.Allocated != 0 || m.Reserved != 0 || m.PeakAllocated != 0 {
			const mib = 1 << 20
			v[TagAllocated], v[TagPeak], v[TagReserved] = float64(m.Allocated)/mib, float64(m.PeakAllocated)/mib, float64(m.Reserved)/mib
		}
		t.WriteScalars(i.Step, v)
	case train.EvalEvent:
		v := make(map[string]float64, len(e.Values))
		for k, x := range e.Values {
			v[TagEval+k] = x
		}
		// An evaluation before the first step (at step 0, or at the step a
		// resumed run starts from) does not start the session: the steps
		// the previous run logged up to there stay.
		t.writeScalars(e.Step, v, false)
	}
}

// WriteScalars writes one event at step holding values (tag → value,
// in tag order; NaN and infinities left out): a Go program's own
// scalars beside the Sink's. Nothing is written when no value is
// finite. The file's first such event is preceded by the SessionLog
// START event at step (see TensorBoard). It returns the file's first
// write error, which Close returns too.
func (t *TensorBoard) WriteScalars(step int, values map[string]float64) error {
	return t.writeScalars(step, values, true)
}

func (t *TensorBoard) writeScalars(step int, values map[string]float64, start bool) error {
	tags := make([]string, 0, len(values))
	for k, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			tags = append(tags, k)
		}
	}
	if len(tags) == 0 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.err
	}
	sort.Strings(tags)
	vals := make([]scalar, len(tags))
	for k, tag := range tags {
		vals[k] = scalar{tag, float32(values[tag])}
	}
	now := time.Now()
	rec := Record(nil, encodeEvent(now, int64(step), "", vals))
	t.mu.Lock()
	defer t.mu.Unlock()
	if start && !t.started {
		t.started = true
		rec = append(Record(nil, encodeSessionStart(now, int64(step))), rec...)
	}
	return t.writeLocked(rec)
}

func (t *TensorBoard) write(rec []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.writeLocked(rec)
}

func (t *TensorBoard) writeLocked(rec []byte) error {
	if t.err != nil {
		return t.err
	}
	if _, err := t.f.Write(rec); err != nil {
		t.err = &TensorBoardError{Path: t.path, Err: err}
	}
	return t.err
}

// Close closes the file and returns the first write error (nil on a nil
// *TensorBoard).
func (t *TensorBoard) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.f.Close()
	if t.err != nil {
		return t.err
	}
	if err != nil {
		return &TensorBoardError{Path: t.path, Err: err}
	}
	return nil
}

// castagnoli is CRC-32C's table, TFRecord's checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is a TFRecord checksum: the CRC-32C of b, rotated right by 15
// bits plus 0xa282ead8 (so that a CRC of CRCs is not trivially valid).
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// Record appends data framed as one TFRecord to b: its length (uint64
// little-endian), the masked CRC of those 8 bytes, data, the masked CRC
// of data.
func Record(b, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	b = append(b, n[:]...)
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(n[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, MaskedCRC(data))
}

// scalar is a Summary.Value with a simple_value.
type scalar struct {
	tag   string
	value float32
}

// Protocol buffer wire types.
const (
	wireVarint = 0
	wire64     = 1
	wireBytes  = 2
	wire32     = 5
)

// encodeEvent encodes a tensorflow.Event: wall_time (1, double), step (2,
// int64), file_version (3, string) when set, and summary (5) with a
// Summary.Value (1) of tag (1) and simple_value (2, float) per scalar.
func encodeEvent(wall time.Time, step int64, fileVersion string, vals []scalar) []byte {
	var b []byte
	b = appendKey(b, 1, wire64)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(wall.UnixNano())/1e9))
	if step != 0 {
		b = appendKey(b, 2, wireVarint)
		b = appendVarint(b, uint64(step))
	}
	if fileVersion != "" {
		b = appendBytes(b, 3, []byte(fileVersion))
	}
	if len(vals) > 0 {
		var summary []byte
		for _, v := range vals {
			var value []byte
			value = appendBytes(value, 1, []byte(v.tag))
			value = appendKey(value, 2, wire32)
			value = binary.LittleEndian.AppendUint32(value, math.Float32bits(v.value))
			summary = appendBytes(summary, 1, value)
		}
		b = appendBytes(b, 5, summary)
	}
	return b
}

// sessionStart is SessionLog.SessionStatus START.
const sessionStart = 1

// encodeSessionStart encodes a tensorflow.Event of wall_time, step and
// session_log (7): a SessionLog whose status (1) is START.
func encodeSessionStart(wall time.Time, step int64) []byte {
	b := encodeEvent(wall, step, "", nil)
	log := appendKey(nil, 1, wireVarint)
	log = appendVarint(log, sessionStart)
	return appendBytes(b, 7, log)
}

func appendKey(b []byte, field, wire int) []byte { return appendVarint(b, uint64(field<<3|wire)) }

// appendBytes appends a length-delimited field.
func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendKey(b, field, wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
