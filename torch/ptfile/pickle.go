package ptfile

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"unsafe"

	"github.com/torchfit/torchfit/torch"
)

// Pickle opcodes (protocol 2, plus what protocol 4 files use).
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opNone           = 'N'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opBinString      = 'T'
	opShortBinString = 'U'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opAppends        = 'e'
	opBinGet         = 'h'
	opLongBinGet     = 'j'
	opEmptyList      = ']'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opSetItems       = 'u'
	opEmptyDict      = '}'
	opEmptyTuple     = ')'
	opBinFloat       = 'G'
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opProto          = 0x80
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opLong4          = 0x8b
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
)

// batchSize is pickle's BATCHSIZE: the most items in one SETITEMS or
// APPENDS group.
const batchSize = 1000

// storageNames maps dtypes to the torch.*Storage class torch.save names.
var storageNames = map[torch.DType]string{
	torch.Float32: "FloatStorage", torch.Float64: "DoubleStorage", torch.Float16: "HalfStorage",
	torch.BFloat16: "BFloat16Storage", torch.Int64: "LongStorage", torch.Int32: "IntStorage",
	torch.Int16: "ShortStorage", torch.Int8: "CharStorage", torch.Uint8: "ByteStorage", torch.Bool: "BoolStorage",
}

type storageOut struct {
	key string
	t   *torch.Tensor
	n   int64 // bytes
}

// pickler writes Python pickle protocol 2 as CPython's C pickler (which
// torch.save's Pickler subclasses) does for torch.save: same opcodes, same
// batches, same memo numbering. Python memoizes strings by object and Go
// by value: they agree where equal strings are one object in Python
// (literals, a loaded file's memoized strings), and storage keys, always
// new objects in Python, are never looked up (newStr).
type pickler struct {
	b        bytes.Buffer
	nmemo    int
	strs     map[string]int
	globals  map[string]int
	tensors  map[*torch.Tensor]int
	seen     map[uintptr]bool // containers being written (cycle check)
	storages []storageOut
	detach   bool // write requires_grad=False (state dicts)
	depth    int
}

func newPickler(detach bool) *pickler {
	return &pickler{strs: map[string]int{}, globals: map[string]int{}, tensors: map[*torch.Tensor]int{},
		seen: map[uintptr]bool{}, detach: detach}
}

func (p *pickler) op(c byte) { p.b.WriteByte(c) }

func (p *pickler) put() int {
	i := p.nmemo
	p.nmemo++
	if i < 256 {
		p.b.WriteByte(opBinPut)
		p.b.WriteByte(byte(i))
	} else {
		p.b.WriteByte(opLongBinPut)
		p.u32(uint32(i))
	}
	return i
}

func (p *pickler) get(i int) {
	if i < 256 {
		p.b.WriteByte(opBinGet)
		p.b.WriteByte(byte(i))
	} else {
		p.b.WriteByte(opLongBinGet)
		p.u32(uint32(i))
	}
}

func (p *pickler) u32(v uint32) {
	var w [4]byte
	bin.LittleEndian.PutUint32(w[:], v)
	p.b.Write(w[:])
}

func (p *pickler) str(s string) {
	if i, ok := p.strs[s]; ok {
		p.get(i)
		return
	}
	p.strs[s] = p.newStr(s)
}

// newStr writes a string without looking it up in the memo: pickle
// memoizes by object, and torch.save makes a new string object for each
// storage key, so an equal string before it (a dict key "0") is not
// reused for it, nor it for one after.
func (p *pickler) newStr(s string) int {
	p.op(opBinUnicode)
	p.u32(uint32(len(s)))
	p.b.WriteString(s)
	return p.put()
}

func (p *pickler) global(module, name string) {
	k := module + "\n" + name + "\n"
	if i, ok := p.globals[k]; ok {
		p.get(i)
		return
	}
	p.op(opGlobal)
	p.b.WriteString(k)
	p.globals[k] = p.put()
}

// int writes an integer as pickle's save_long does for protocol 2.
func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v <= 0xff:
		p.op(opBinInt1)
		p.b.WriteByte(byte(v))
	case v >= 0 && v <= 0xffff:
		p.op(opBinInt2)
		p.b.WriteByte(byte(v))
		p.b.WriteByte(byte(v >> 8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.op(opBinInt)
		p.u32(uint32(int32(v)))
	default:
		p.op(opLong1)
		enc := encodeLong(v)
		p.b.WriteByte(byte(len(enc)))
		p.b.Write(enc)
	}
}

// encodeLong is pickle.encode_long: minimal little-endian two's complement.
func encodeLong(v int64) []byte {
	var w [8]byte
	bin.LittleEndian.PutUint64(w[:], uint64(v))
	n := 8
	for n > 1 {
		top, next := w[n-1], w[n-2]
		if (top == 0 && next&0x80 == 0) || (top == 0xff && next&0x80 != 0) {
			n--
			continue
		}
		break
	}
	return w[:n]
}

func (p *pickler) float(v float64) {
	p.op(opBinFloat)
	var w [8]byte
	bin.BigEndian.PutUint64(w[:], math.Float64bits(v))
	p.b.Write(w[:])
}

func (p *pickler) bool(v bool) {
	if v {
		p.op(opNewTrue)
	} else {
		p.op(opNewFalse)
	}
}

// tuple writes a tuple of items written by each, memoized as Python does.
func (p *pickler) tuple(n int, each func(k int) error) error {
	if n == 0 {
		p.op(opEmptyTuple)
		return nil
	}
	if n > 3 {
		p.op(opMark)
	}
	for k := 0; k < n; k++ {
		if err := each(k); err != nil {
			return err
		}
	}
	switch n {
	case 1:
		p.op(opTuple1)
	case 2:
		p.op(opTuple2)
	case 3:
		p.op(opTuple3)
	default:
		p.op(opTuple)
	}
	p.put()
	return nil
}

func (p *pickler) ints(xs []int64) {
	_ = p.tuple(len(xs), func(k int) error { p.int(xs[k]); return nil })
}

func (p *pickler) emptyOrderedDict() {
	p.global("collections", "OrderedDict")
	p.op(opEmptyTuple)
	p.op(opReduce)
	p.put()
}

// batching is how CPython's C pickler (_pickle.c, which torch.save's
// Pickler is) groups a container's items.
type batching int

const (
	// exactDict is batch_dict_exact, for a dict: one item with SETITEM;
	// more in MARK ... SETITEMS batches of up to 1000, and after a full
	// batch another, even an empty one.
	exactDict batching = iota
	// exactList is batch_list_exact, for a list: one item with APPEND;
	// more in MARK ... APPENDS batches of up to 1000.
	exactList
	// iterated is batch_dict, for an OrderedDict's items: batches of up to
	// 1000, the last with SETITEM when it holds one item.
	iterated
)

// items writes n items (each writes one) with the opcodes for several
// (multi) or one (single), batched as mode says.
func (p *pickler) items(n int, each func(k int) error, multi, single byte, mode batching) error {
	if n == 0 {
		return nil
	}
	if n == 1 && mode != iterated {
		if err := each(0); err != nil {
			return err
		}
		p.op(single)
		return nil
	}
	for k := 0; ; {
		batch := min(batchSize, n-k)
		if batch == 0 && mode != exactDict {
			return nil
		}
		if batch == 1 && mode == iterated {
			if err := each(k); err != nil {
				return err
			}
			p.op(single)
			return nil
		}
		p.op(opMark)
		for end := k + batch; k < end; k++ {
			if err := each(k); err != nil {
				return err
			}
		}
		p.op(multi)
		if batch < batchSize || (mode == exactList && k == n) {
			return nil
		}
	}
}

func (p *pickler) dict(d *Dict) error {
	mode := iterated
	if d.Ordered {
		p.emptyOrderedDict()
	} else {
		mode = exactDict
		p.op(opEmptyDict)
		p.put()
	}
	err := p.items(len(d.Entries), func(k int) error {
		key := normKey(d.Entries[k].Key)
		switch key.(type) {
		case string, int64, float64, bool, nil:
		default:
			if _, ok := key.(torch.DType); !ok {
				return fmt.Errorf("dict key %v: keys must be strings, integers, floats, bools or nil, not %T", key, key)
			}
		}
		if err := p.value(key); err != nil {
			return err
		}
		return p.value(d.Entries[k].Value)
	}, opSetItems, opSetItem, mode)
	if err != nil {
		return err
	}
	if d.Ordered && d.Attrs.Len() > 0 {
		a := *d.Attrs
		a.Ordered = false
		if err := p.value(&a); err != nil {
			return err
		}
		p.op(opBuild)
	}
	return nil
}

func (p *pickler) list(n int, each func(k int) error) error {
	p.op(opEmptyList)
	p.put()
	return p.items(n, each, opAppends, opAppend, exactList)
}

// contiguousStrides are PyTorch's strides for a contiguous tensor.
func contiguousStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for k := len(shape) - 1; k >= 0; k-- {
		st[k] = acc
		acc *= max(shape[k], 1)
	}
	return st
}

func (p *pickler) tensor(t *torch.Tensor) error {
	if i, ok := p.tensors[t]; ok {
		p.get(i)
		return nil
	}
	if t.Freed() {
		return fmt.Errorf("tensor was released (Free) before Save")
	}
	if d := t.Dim(); d > torch.MaxDims {
		return fmt.Errorf("tensor has %d dimensions; torchfit supports %d", d, torch.MaxDims)
	}
	dt := t.DType()
	cls, ok := storageNames[dt]
	if !ok {
		return fmt.Errorf("cannot save a %v tensor", dt)
	}
	shape, numel := t.Shape(), t.Numel()
	key := strconv.Itoa(len(p.storages))
	p.storages = append(p.storages, storageOut{key: key, t: t, n: t.NBytes()})

	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op(opMark)
	// persistent id ('storage', torch.XStorage, key, 'cpu', numel)
	p.op(opMark)
	p.str("storage")
	p.global("torch", cls)
	p.newStr(key)
	p.str("cpu")
	p.int(numel)
	p.op(opTuple)
	p.put()
	p.op(opBinPersID)
	p.int(0)
	p.ints(shape)
	p.ints(contiguousStrides(shape))
	p.bool(t.RequiresGrad() && !p.detach)
	p.emptyOrderedDict()
	p.op(opTuple)
	p.put()
	p.op(opReduce)
	p.tensors[t] = p.put()
	return nil
}

// enter guards against cycles and absurd nesting.
func (p *pickler) enter(ptr uintptr) error {
	p.depth++
	if p.depth > maxDepth {
		return fmt.Errorf("containers nested deeper than %d", maxDepth)
	}
	if ptr != 0 {
		if p.seen[ptr] {
			return fmt.Errorf("a container contains itself")
		}
		p.seen[ptr] = true
	}
	return nil
}

func (p *pickler) leave(ptr uintptr) {
	p.depth--
	delete(p.seen, ptr)
}

func (p *pickler) value(v any) error {
	switch x := v.(type) {
	case nil:
		p.op(opNone)
	case *torch.Tensor:
		if x == nil {
			p.op(opNone)
			return nil
		}
		return p.tensor(x)
	case bool:
		p.bool(x)
	case int:
		p.int(int64(x))
	case int8:
		p.int(int64(x))
	case int16:
		p.int(int64(x))
	case int32:
		p.int(int64(x))
	case int64:
		p.int(x)
	case uint8:
		p.int(int64(x))
	case uint16:
		p.int(int64(x))
	case uint32:
		p.int(int64(x))
	case uint:
		if uint64(x) > math.MaxInt64 {
			return fmt.Errorf("integer %d does not fit in int64", x)
		}
		p.int(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return fmt.Errorf("integer %d does not fit in int64", x)
		}
		p.int(int64(x))
	case float32:
		p.float(float64(x))
	case float64:
		p.float(x)
	case string:
		p.str(x)
	case torch.DType:
		if dt, err := torch.ParseDType(x.String()); err != nil || dt != x {
			return fmt.Errorf("unknown dtype %v", x)
		}
		p.global("torch", x.String())
	case *Dict:
		if x == nil {
			p.op(opNone)
			return nil
		}
		ptr := uintptr(unsafe.Pointer(x))
		if err := p.enter(ptr); err != nil {
			return err
		}
		defer p.leave(ptr)
		return p.dict(x)
	case Dict:
		return p.value(&x)
	case []torch.Named:
		return p.value(torch.StateDict(x))
	case torch.StateDict:
		d := &Dict{Ordered: true, Entries: make([]DictEntry, len(x))}
		for k, e := range x {
			d.Entries[k] = DictEntry{e.Name, e.T}
		}
		return p.dict(d)
	case Tuple:
		if err := p.enter(0); err != nil {
			return err
		}
		defer p.leave(0)
		return p.tuple(len(x), func(k int) error { return p.value(x[k]) })
	case []any:
		var ptr uintptr
		if len(x) > 0 {
			ptr = uintptr(unsafe.Pointer(&x[0]))
		}
		if err := p.enter(ptr); err != nil {
			return err
		}
		defer p.leave(ptr)
		return p.list(len(x), func(k int) error { return p.value(x[k]) })
	default:
		return p.reflectValue(v)
	}
	return nil
}

// reflectValue writes other slices as lists and maps with string or
// integer keys as dicts (sorted by key).
func (p *pickler) reflectValue(v any) error {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
			return fmt.Errorf("cannot save []byte")
		}
		if err := p.enter(0); err != nil {
			return err
		}
		defer p.leave(0)
		return p.list(rv.Len(), func(k int) error { return p.value(rv.Index(k).Interface()) })
	case reflect.Map:
		keys := rv.MapKeys()
		switch rv.Type().Key().Kind() {
		case reflect.String:
			sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			sort.Slice(keys, func(a, b int) bool { return keys[a].Int() < keys[b].Int() })
		default:
			return fmt.Errorf("cannot save a map with %v keys (use string or integer keys)", rv.Type().Key())
		}
		ptr := rv.Pointer()
		if err := p.enter(ptr); err != nil {
			return err
		}
		defer p.leave(ptr)
		d := &Dict{Entries: make([]DictEntry, len(keys))}
		for k, key := range keys {
			var kv any
			if key.Kind() == reflect.String {
				kv = key.String()
			} else {
				kv = key.Int()
			}
			d.Entries[k] = DictEntry{kv, rv.MapIndex(key).Interface()}
		}
		return p.dict(d)
	case reflect.Pointer:
		if rv.IsNil() {
			p.op(opNone)
			return nil
		}
	}
	return fmt.Errorf("cannot save a %T (want tensors, dicts, lists, numbers, strings, bools or nil)", v)
}

// encode writes v as PyTorch 2.x's torch.save does: archive/data.pkl,
// .format_version, .storage_alignment and byteorder, archive/data/<key>
// for each storage (64-byte aligned), archive/version and
// archive/.data/serialization_id. PyTorch 1.13 writes only data.pkl, the
// storages and version, and loads this layout too (the other records are
// ignored there).
func encode(w io.Writer, archive string, v any, stateDict bool) (err error) {
	if archive == "" {
		archive = "archive"
	}
	p := newPickler(stateDict)
	var perr error
	if e := torch.Try(func() {
		p.b.WriteByte(opProto)
		p.b.WriteByte(2)
		perr = p.value(v)
		p.op(opStop)
	}); e != nil {
		return e
	}
	if perr != nil {
		return perr
	}
	zw := newZipWriter(w, archive)
	for _, r := range []struct{ name, data string }{
		{"data.pkl", p.b.String()},
		// Version 1: storages are written in their keys' numeric order.
		{".format_version", "1"},
		{".storage_alignment", strconv.Itoa(recordAlign)},
		// torchfit runs on little-endian machines, as libtorch's builds do.
		{"byteorder", "little"},
	} {
		if err := zw.record(r.name, []byte(r.data)); err != nil {
			return err
		}
	}
	for _, s := range p.storages {
		if err := writeStorage(zw, "data/"+s.key, s); err != nil {
			return err
		}
	}
	if err := zw.record("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.close()
}

// writeStorage writes a tensor's elements: straight from libtorch's memory
// for contiguous CPU tensors, through a contiguous CPU copy otherwise.
func writeStorage(zw *zipWriter, name string, s storageOut) error {
	err := s.t.RawBytes(func(data []byte) error {
		if int64(len(data)) != s.n {
			return fmt.Errorf("tensor changed while being saved")
		}
		return zw.record(name, data)
	})
	if err != nil {
		return fmt.Errorf("storage %s: %w", name, err)
	}
	return nil
}
