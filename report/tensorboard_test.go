package report

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// frameError is a TFRecord that does not decode.
type frameError struct {
	Offset int
	What   string
}

func (e *frameError) Error() string { return fmt.Sprintf("record at byte %d: %s", e.Offset, e.What) }

// readRecords splits b into TFRecords, checking both checksums.
func readRecords(b []byte) ([][]byte, error) {
	var recs [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return recs, &frameError{off, "truncated header"}
		}
		head := b[off : off+8]
		if got := binary.LittleEndian.Uint32(b[off+8:]); got != MaskedCRC(head) {
			return recs, &frameError{off, "length checksum"}
		}
		n := binary.LittleEndian.Uint64(head)
		if uint64(len(b)-off-16) < n {
			return recs, &frameError{off, "truncated data"}
		}
		data := b[off+12 : off+12+int(n)]
		if got := binary.LittleEndian.Uint32(b[off+12+int(n):]); got != MaskedCRC(data) {
			return recs, &frameError{off, "data checksum"}
		}
		recs = append(recs, data)
		off += 16 + int(n)
	}
	return recs, nil
}

// pbField is one field of a protocol buffer message.
type pbField struct {
	num, wire int
	u         uint64 // varint, fixed32 or fixed64
	bytes     []byte
}

func readVarint(b []byte, off *int) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		if *off >= len(b) {
			return 0, fmt.Errorf("truncated varint")
		}
		c := b[*off]
		*off++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("varint too long")
}

// parsePB decodes a message's fields (the wire types an Event uses).
func parsePB(b []byte) ([]pbField, error) {
	var fs []pbField
	for off := 0; off < len(b); {
		key, err := readVarint(b, &off)
		if err != nil {
			return nil, err
		}
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case wireVarint:
			if f.u, err = readVarint(b, &off); err != nil {
				return nil, err
			}
		case wire64:
			if off+8 > len(b) {
				return nil, fmt.Errorf("truncated fixed64")
			}
			f.u, off = binary.LittleEndian.Uint64(b[off:]), off+8
		case wire32:
			if off+4 > len(b) {
				return nil, fmt.Errorf("truncated fixed32")
			}
			f.u, off = uint64(binary.LittleEndian.Uint32(b[off:])), off+4
		case wireBytes:
			n, err := readVarint(b, &off)
			if err != nil || uint64(len(b)-off) < n {
				return nil, fmt.Errorf("truncated bytes")
			}
			f.bytes, off = b[off:off+int(n)], off+int(n)
		default:
			return nil, fmt.Errorf("wire type %d", f.wire)
		}
		fs = append(fs, f)
	}
	return fs, nil
}

// event is a decoded tensorflow.Event.
type event struct {
	wall        float64
	step        int64
	fileVersion string
	start       bool // a SessionLog START
	values      map[string]float32
}

func decodeEvent(t *testing.T, b []byte) event {
	t.Helper()
	fs, err := parsePB(b)
	require.NoError(t, err)
	var e event
	for _, f := range fs {
		switch f.num {
		case 1:
			require.Equal(t, wire64, f.wire)
			e.wall = math.Float64frombits(f.u)
		case 2:
			require.Equal(t, wireVarint, f.wire)
			e.step = int64(f.u)
		case 3:
			e.fileVersion = string(f.bytes)
		case 7:
			log, err := parsePB(f.bytes)
			require.NoError(t, err)
			require.Equal(t, []pbField{{num: 1, wire: wireVarint, u: 1}}, log, "SessionLog{status: START}")
			e.start = true
		case 5:
			e.values = map[string]float32{}
			vals, err := parsePB(f.bytes)
			require.NoError(t, err)
			for _, v := range vals {
				require.Equal(t, 1, v.num, "Summary.value")
				parts, err := parsePB(v.bytes)
				require.NoError(t, err)
				require.Len(t, parts, 2)
				require.Equal(t, 1, parts[0].num, "Value.tag")
				require.Equal(t, [2]int{2, wire32}, [2]int{parts[1].num, parts[1].wire}, "Value.simple_value")
				e.values[string(parts[0].bytes)] = math.Float32frombits(uint32(parts[1].u))
			}
		default:
			t.Fatalf("unexpected Event field %d", f.num)
		}
	}
	return e
}

// readEventFile decodes every event of one file.
func readEventFile(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	recs, err := readRecords(b)
	require.NoError(t, err)
	var evs []event
	for _, r := range recs {
		evs = append(evs, decodeEvent(t, r))
	}
	return evs
}

// tbRun is one run's events for a TensorBoard: steps 1.. and evaluations.
func tbRun(first, steps int) []train.Event {
	var evs []train.Event
	for s := first; s < first+steps; s++ {
		loss := 2.5 / float64(s)
		if s == 2 {
			loss = math.NaN() // a skipped step: no loss scalar
		}
		evs = append(evs, train.StepEvent{Epoch: 0, StepInfo: train.StepInfo{
			Step: s, Loss: loss, LR: 1e-3 * float64(s), GradNorm: 0.5 + float64(s), Samples: 8, Duration: 250 * time.Millisecond,
			Memory: torch.MemStats{Allocated: int64(s) << 20, PeakAllocated: int64(s+3) << 20, Reserved: 64 << 20},
		}})
		evs = append(evs, train.Message{Text: "ignored"}, train.MemoryEvent{Step: s})
	}
	return append(evs, train.EvalEvent{Step: first + steps - 1, Epoch: 1, Values: map[string]float64{"val_loss": 1.25, "cer": 0.125 * float64(first)}})
}

// tbWant is what the runs' events give: tag → step → value.
func tbWant(runs ...[]train.Event) map[string]map[int64]float32 {
	want := map[string]map[int64]float32{}
	put := func(tag string, step int, v float64) {
		if math.IsNaN(v) {
			return
		}
		if want[tag] == nil {
			want[tag] = map[int64]float32{}
		}
		want[tag][int64(step)] = float32(v)
	}
	for _, run := range runs {
		for _, e := range run {
			switch e := e.(type) {
			case train.StepEvent:
				i := e.StepInfo
				put(TagLoss, i.Step, i.Loss)
				put(TagLR, i.Step, i.LR)
				put(TagGradNorm, i.Step, i.GradNorm)
				put(TagRate, i.Step, 32)
				put(TagAllocated, i.Step, float64(i.Memory.Allocated>>20))
				put(TagPeak, i.Step, float64(i.Memory.PeakAllocated>>20))
				put(TagReserved, i.Step, 64)
			case train.EvalEvent:
				for k, v := range e.Values {
					put(TagEval+k, e.Step, v)
				}
			}
		}
	}
	return want
}

// writeRuns writes each run through its own TensorBoard in dir.
func writeRuns(t *testing.T, dir string, runs ...[]train.Event) []string {
	t.Helper()
	var paths []string
	for _, run := range runs {
		tb, err := OpenTensorBoard(dir)
		require.NoError(t, err)
		for _, e := range run {
			tb.Sink(e)
		}
		require.NoError(t, tb.Close())
		paths = append(paths, tb.Path())
	}
	return paths
}

// The framing and the events, decoded in Go: the first event names the
// file version, then one event per step and per evaluation.
func TestTensorBoardFileDecodes(t *testing.T) {
	// CRC-32C's check value (of "123456789") is 0xe3069283.
	c := crc32.Checksum([]byte("123456789"), castagnoli)
	require.Equal(t, uint32(0xe3069283), c)
	require.Equal(t, ((c>>15)|(c<<17))+0xa282ead8, MaskedCRC([]byte("123456789")))

	dir := filepath.Join(t.TempDir(), "runs", "a")
	before := time.Now()
	run := tbRun(1, 3)
	path := writeRuns(t, dir, run)[0]
	require.Regexp(t, regexp.MustCompile(`^events\.out\.tfevents\.\d+\.[^/]+$`), filepath.Base(path))
	evs := readEventFile(t, path)
	require.Len(t, evs, 6, "the version, the session's start, 3 steps, 1 evaluation")
	require.Equal(t, "brain.Event:2", evs[0].fileVersion)
	require.Nil(t, evs[0].values)
	require.Equal(t, event{wall: evs[1].wall, step: 1, start: true}, evs[1], "START at the first step")
	for _, e := range evs[2:] {
		require.False(t, e.start)
	}
	got := map[string]map[int64]float32{}
	for _, e := range evs {
		require.InDelta(t, float64(time.Now().UnixNano())/1e9, e.wall, time.Since(before).Seconds()+1)
		for tag, v := range e.values {
			if got[tag] == nil {
				got[tag] = map[int64]float32{}
			}
			got[tag][e.step] = v
		}
	}
	require.Equal(t, tbWant(run), got)
	require.NotContains(t, got[TagLoss], int64(2), "a NaN loss is left out")

	// A damaged byte is caught by the checksums.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		offset int
		what   string
	}{
		{"length", 0, "length checksum"},
		{"data", 12, "data checksum"},
		{"crc", len(b) - 1, "data checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := append([]byte(nil), b...)
			bad[tc.offset] ^= 0x40
			_, err := readRecords(bad)
			var fe *frameError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.what, fe.What)
		})
	}
}

// Each run appends a new file beside the files already in the directory.
func TestTensorBoardKeepsEarlierRuns(t *testing.T) {
	dir := t.TempDir()
	paths := writeRuns(t, dir, tbRun(1, 2), tbRun(3, 2), tbRun(5, 1))
	sizes := map[string]int64{}
	for _, p := range paths {
		st, err := os.Stat(p)
		require.NoError(t, err)
		sizes[p] = st.Size()
	}
	require.Len(t, sizes, 3, "three files, none overwritten")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	require.Len(t, readEventFile(t, paths[0]), 5, "the first run's file is whole")
}

// An event file's directory that cannot be made is a *TensorBoardError.
func TestTensorBoardRefusesAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, dir := range []string{file, filepath.Join(file, "below")} {
		_, err := OpenTensorBoard(dir)
		var te *TensorBoardError
		require.ErrorAs(t, err, &te, dir)
		require.Equal(t, dir, te.Path)
	}
	var tb *TensorBoard
	require.NoError(t, tb.Close(), "a nil sink closes")
}

// PyPI's tensorboard reads the runs of a directory: tags, steps and values.
func TestTensorBoardReadsTheFiles(t *testing.T) {
	if !pyref.HasModule("tensorboard") {
		t.Skipf("%s has no tensorboard module (the PyTorch 2.11 venv has it: make venv)", pyref.Python)
	}
	dir := t.TempDir()
	runs := [][]train.Event{tbRun(1, 3), tbRun(4, 2)}
	writeRuns(t, dir, runs...)
	var got struct {
		Version float64                 `json:"version"`
		Scalars map[string][][2]float64 `json:"scalars"`
		CRC     map[string]uint32       `json:"crc"`
	}
	pyref.Run(t, `
		from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
		from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
		acc = EventAccumulator(inp["dir"])
		acc.Reload()
		emit({"version": acc.file_version,
		      "scalars": {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]},
		      "crc": {s: masked_crc32c(s.encode()) for s in inp["crc"]}})
	`, map[string]any{"dir": dir, "crc": []string{"", "brain.Event:2", "123456789"}}, &got)
	require.Equal(t, 2.0, got.Version)
	for s, c := range got.CRC {
		require.Equal(t, c, MaskedCRC([]byte(s)), "masked CRC of %q", s)
	}
	requireScalars(t, tbWant(runs...), got.Scalars, func(string) bool { return true })
}

// requireScalars compares TensorBoard's scalars (tag → [step, value]
// pairs, as read) with want (tag → step → value); ordered(tag) says the
// tag's steps come once each, in increasing order.
func requireScalars(t *testing.T, want map[string]map[int64]float32, got map[string][][2]float64, ordered func(tag string) bool) {
	t.Helper()
	require.Equal(t, sortedKeys(want), sortedKeys(got), "tags")
	for tag, pts := range got {
		steps := map[int64]float32{}
		var order []int64
		for _, p := range pts {
			steps[int64(p[0])] = float32(p[1])
			order = append(order, int64(p[0]))
		}
		require.Equal(t, want[tag], steps, tag)
		if ordered(tag) {
			require.IsIncreasing(t, order, "%s: each step once, in order", tag)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// A run resumed from a checkpoint older than the last step logged (a
// crash after step 5, a checkpoint at step 3) redoes steps 4 and 5:
// TensorBoard shows the resumed run's values there, once, and keeps the
// first run's up to step 3 and its evaluation there. An evaluation
// before the resumed run's first step does not purge (the first
// run's step 3 stays).
func TestTensorBoardResumedRunReplacesRedoneSteps(t *testing.T) {
	if !pyref.HasModule("tensorboard") {
		t.Skipf("%s has no tensorboard module (the PyTorch 2.11 venv has it: make venv)", pyref.Python)
	}
	dir := t.TempDir()
	first, resumed := tbRun(1, 5), tbRun(4, 3) // steps 1-5; steps 4-6
	resumed = append([]train.Event{train.EvalEvent{Step: 3, Values: map[string]float64{"val_loss": 1.25}}}, resumed...)
	writeRuns(t, dir, first, resumed)
	want := tbWant(first)
	for _, steps := range want {
		for s := range steps {
			if s >= 4 { // purged: the resumed run's first step is 4
				delete(steps, s)
			}
		}
	}
	for tag, steps := range tbWant(resumed) {
		if want[tag] == nil {
			want[tag] = map[int64]float32{}
		}
		for s, v := range steps {
			want[tag][s] = v
		}
	}
	for _, loader := range []string{"EventAccumulator", "plugin_event_accumulator"} {
		t.Run(loader, func(t *testing.T) {
			var got map[string][][2]float64
			pyref.Run(t, `
				if inp["loader"] == "EventAccumulator":
				    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
				    acc = EventAccumulator(inp["dir"]); acc.Reload()
				    emit({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]})
				else:  # what tensorboard --logdir --load_fast=false serves
				    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
				    from tensorboard.util import tensor_util
				    acc = EventAccumulator(inp["dir"]); acc.Reload()
				    emit({tag: [[e.step, float(tensor_util.make_ndarray(e.tensor_proto))] for e in acc.Tensors(tag)]
				          for tag in acc.Tags()["tensors"]})
			`, map[string]any{"dir": dir, "loader": loader}, &got)
			// Both runs evaluated at step 3.
			requireScalars(t, want, got, func(tag string) bool { return tag != TagEval+"val_loss" })
		})
	}
}
