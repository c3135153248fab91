package ptfile

import (
	"archive/zip"
	"bytes"
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/torchfit/torchfit/torch"
)

// maxDepth bounds container nesting (reading and writing).
const maxDepth = 1000

// maxPickle bounds data.pkl (it holds structure, not tensor data).
const maxPickle = 1 << 30

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadFile}, args...)...)
}

// pyGlobal is an allow-listed Python global.
type pyGlobal struct {
	module, name string
	dtype        torch.DType // storage classes and dtypes
	isDType      bool        // torch.float32 etc. (a value, not a class)
}

func (g pyGlobal) String() string { return g.module + "." + g.name }

// storageRef is a BINPERSID storage: ('storage', class, key, location, numel).
type storageRef struct {
	key   string
	dtype torch.DType
	numel int64
}

// lazyTensor is a tensor whose description the pickle gave and checked
// against its storage's size, and whose storage is read only when the
// result needs it (finish): a part of the file a caller did not ask for
// (LoadParts) is never allocated.
type lazyTensor struct {
	s              *storageRef
	off            int64
	shape, strides []int64
	numel          int64
	grad           bool // requires_grad (applied to float dtypes)
}

// pyList is a list while it is being built (APPEND mutates it in place).
type pyList struct{ items []any }

type pyMark struct{}

var storageDTypes = func() map[string]torch.DType {
	m := map[string]torch.DType{}
	for dt, name := range storageNames {
		m[name] = dt
	}
	return m
}()

// allowGlobal resolves a GLOBAL, refusing anything outside the allow list.
func allowGlobal(module, name string) (pyGlobal, error) {
	g := pyGlobal{module: module, name: name}
	switch module + "." + name {
	case "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
		"torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state", "torch.device":
		return g, nil
	}
	if module == "torch" {
		if dt, ok := storageDTypes[name]; ok {
			g.dtype = dt
			return g, nil
		}
		if dt, err := torch.ParseDType(name); err == nil && name == dt.String() {
			g.dtype, g.isDType = dt, true
			return g, nil
		}
	}
	switch {
	case module == "torch" && otherStorages[name]:
		// A tensor's storage class, of another dtype.
		return g, fmt.Errorf("%w: %w: storage class torch.%s (torchfit has %s)", ErrBadFile, ErrDType, name, dtypeList)
	case module+"."+name == "torch._utils._rebuild_tensor_v3":
		// PyTorch 2.x's rebuild for the dtypes without a storage class.
		return g, fmt.Errorf("%w: %w: a tensor saved with torch._utils._rebuild_tensor_v3, as PyTorch saves float8, uint16, uint32 and uint64 tensors (torchfit has %s)", ErrBadFile, ErrDType, dtypeList)
	}
	return g, badf("global %s.%s is not allowed (torchfit loads only tensors, dicts, lists, tuples, numbers, strings and None, like torch.load(weights_only=True))", module, name)
}

// otherStorages are PyTorch's storage classes of dtypes torchfit does not
// have.
var otherStorages = map[string]bool{
	"ComplexFloatStorage": true, "ComplexDoubleStorage": true, "QUInt8Storage": true, "QInt8Storage": true,
	"QInt32Storage": true, "QUInt4x2Storage": true, "QUInt2x4Storage": true,
}

// dtypeList names the dtypes torchfit loads, for ErrDType's message.
const dtypeList = "float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8 and bool"

// unpickler is a pickle VM for the subset torch.save produces. It never
// runs code: GLOBALs come from a fixed allow list and REDUCE only applies
// the known rebuild functions.
type unpickler struct {
	data   []byte
	pos    int
	stack  []any
	marks  []int
	memo   map[uint32]any
	dicts  map[*Dict]map[any]int
	loader *storageLoader
}

func (u *unpickler) need(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, badf("data.pkl is truncated at byte %d", u.pos)
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

func (u *unpickler) byte1() (byte, error) {
	b, err := u.need(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (u *unpickler) u32() (uint32, error) {
	b, err := u.need(4)
	if err != nil {
		return 0, err
	}
	return bin.LittleEndian.Uint32(b), nil
}

func (u *unpickler) line() (string, error) {
	i := bytes.IndexByte(u.data[u.pos:], '\n')
	if i < 0 || i > 256 {
		return "", badf("malformed GLOBAL at byte %d", u.pos)
	}
	s := string(u.data[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, badf("pickle stack underflow at byte %d", u.pos)
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, badf("pickle stack underflow at byte %d", u.pos)
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the items pushed since the last MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, badf("pickle MARK missing at byte %d", u.pos)
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) str(n int) error {
	b, err := u.need(n)
	if err != nil {
		return err
	}
	if !utf8.Valid(b) {
		return badf("string at byte %d is not UTF-8", u.pos-n)
	}
	u.push(string(b))
	return nil
}

func (u *unpickler) setItem(d *Dict, k, v any) error {
	switch k.(type) {
	case string, int64, float64, bool, nil:
	default:
		return badf("dict key of type %s is not supported", typeName(k))
	}
	idx := u.dicts[d]
	if idx == nil {
		idx = map[any]int{}
		for i, e := range d.Entries {
			idx[e.Key] = i
		}
		u.dicts[d] = idx
	}
	if i, ok := idx[k]; ok {
		d.Entries[i].Value = v
		return nil
	}
	idx[k] = len(d.Entries)
	d.Entries = append(d.Entries, DictEntry{k, v})
	return nil
}

func (u *unpickler) memoGet(i uint32) error {
	v, ok := u.memo[i]
	if !ok {
		return badf("pickle memo %d is missing", i)
	}
	u.push(v)
	return nil
}

func (u *unpickler) memoPut(i uint32) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if len(u.memo) > len(u.data) {
		return badf("pickle memo too large")
	}
	u.memo[i] = v
	return nil
}

func asInt(v any) (int64, bool) {
	i, ok := v.(int64)
	return i, ok
}

// run executes the pickle and returns the object STOP finds.
func (u *unpickler) run() (any, error) {
	for {
		c, err := u.byte1()
		if err != nil {
			return nil, err
		}
		switch c {
		case opProto:
			if _, err := u.byte1(); err != nil {
				return nil, err
			}
		case opFrame:
			if _, err := u.need(8); err != nil {
				return nil, err
			}
		case opStop:
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return v, nil
		case opMark:
			u.marks = append(u.marks, len(u.stack))
		case opPop:
			if _, err := u.pop(); err != nil {
				return nil, err
			}
		case opPopMark:
			if _, err := u.popMark(); err != nil {
				return nil, err
			}
		case opDup:
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			u.push(v)
		case opNone:
			u.push(nil)
		case opNewTrue:
			u.push(true)
		case opNewFalse:
			u.push(false)
		case opBinInt:
			v, err := u.u32()
			if err != nil {
				return nil, err
			}
			u.push(int64(int32(v)))
		case opBinInt1:
			v, err := u.byte1()
			if err != nil {
				return nil, err
			}
			u.push(int64(v))
		case opBinInt2:
			b, err := u.need(2)
			if err != nil {
				return nil, err
			}
			u.push(int64(bin.LittleEndian.Uint16(b)))
		case opLong1, opLong4:
			var n int
			if c == opLong1 {
				b, err := u.byte1()
				if err != nil {
					return nil, err
				}
				n = int(b)
			} else {
				b, err := u.u32()
				if err != nil {
					return nil, err
				}
				n = int(int32(b))
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			v, err := decodeLong(b)
			if err != nil {
				return nil, err
			}
			u.push(v)
		case opBinFloat:
			b, err := u.need(8)
			if err != nil {
				return nil, err
			}
			u.push(math.Float64frombits(bin.BigEndian.Uint64(b)))
		case opBinUnicode, opBinString, opBinBytes, opShortBinUni, opShortBinString, opShortBinBytes:
			short := c == opShortBinUni || c == opShortBinString || c == opShortBinBytes
			n, err := u.count(!short)
			if err != nil {
				return nil, err
			}
			if c == opBinBytes || c == opShortBinBytes {
				b, err := u.need(int(n))
				if err != nil {
					return nil, err
				}
				u.push(append([]byte(nil), b...))
			} else if err := u.str(int(n)); err != nil {
				return nil, err
			}
		case opBinUnicode8, opBinBytes8:
			b, err := u.need(8)
			if err != nil {
				return nil, err
			}
			n := bin.LittleEndian.Uint64(b)
			if n > uint64(len(u.data)) {
				return nil, badf("data.pkl is truncated at byte %d", u.pos)
			}
			if c == opBinBytes8 {
				b, err := u.need(int(n))
				if err != nil {
					return nil, err
				}
				u.push(append([]byte(nil), b...))
			} else if err := u.str(int(n)); err != nil {
				return nil, err
			}
		case opEmptyList:
			u.push(&pyList{})
		case opEmptyDict:
			u.push(&Dict{})
		case opEmptyTuple:
			u.push(Tuple{})
		case opTuple:
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			u.push(Tuple(items))
		case opTuple1, opTuple2, opTuple3:
			n := int(c-opTuple1) + 1
			t := make(Tuple, n)
			for k := n - 1; k >= 0; k-- {
				if t[k], err = u.pop(); err != nil {
					return nil, err
				}
			}
			u.push(t)
		case opAppend, opAppends:
			var items []any
			if c == opAppend {
				v, err := u.pop()
				if err != nil {
					return nil, err
				}
				items = []any{v}
			} else if items, err = u.popMark(); err != nil {
				return nil, err
			}
			l, err := u.top()
			if err != nil {
				return nil, err
			}
			pl, ok := l.(*pyList)
			if !ok {
				return nil, badf("APPEND to %s at byte %d", typeName(l), u.pos)
			}
			pl.items = append(pl.items, items...)
		case opSetItem, opSetItems:
			var items []any
			if c == opSetItem {
				v, err := u.pop()
				if err != nil {
					return nil, err
				}
				k, err := u.pop()
				if err != nil {
					return nil, err
				}
				items = []any{k, v}
			} else if items, err = u.popMark(); err != nil {
				return nil, err
			}
			if len(items)%2 != 0 {
				return nil, badf("SETITEMS with an odd number of items at byte %d", u.pos)
			}
			top, err := u.top()
			if err != nil {
				return nil, err
			}
			d, ok := top.(*Dict)
			if !ok {
				return nil, badf("SETITEM on %s at byte %d", typeName(top), u.pos)
			}
			for k := 0; k < len(items); k += 2 {
				if err := u.setItem(d, items[k], items[k+1]); err != nil {
					return nil, err
				}
			}
		case opBinPut, opLongBinPut:
			i, err := u.count(c == opLongBinPut)
			if err != nil {
				return nil, err
			}
			if err := u.memoPut(i); err != nil {
				return nil, err
			}
		case opMemoize:
			if err := u.memoPut(uint32(len(u.memo))); err != nil {
				return nil, err
			}
		case opBinGet, opLongBinGet:
			i, err := u.count(c == opLongBinGet)
			if err != nil {
				return nil, err
			}
			if err := u.memoGet(i); err != nil {
				return nil, err
			}
		case opGlobal:
			mod, err := u.line()
			if err != nil {
				return nil, err
			}
			name, err := u.line()
			if err != nil {
				return nil, err
			}
			g, err := allowGlobal(mod, name)
			if err != nil {
				return nil, err
			}
			u.push(g)
		case opStackGlobal:
			name, err := u.pop()
			if err != nil {
				return nil, err
			}
			mod, err := u.pop()
			if err != nil {
				return nil, err
			}
			ms, ok1 := mod.(string)
			ns, ok2 := name.(string)
			if !ok1 || !ok2 {
				return nil, badf("STACK_GLOBAL needs two strings at byte %d", u.pos)
			}
			g, err := allowGlobal(ms, ns)
			if err != nil {
				return nil, err
			}
			u.push(g)
		case opBinPersID:
			pid, err := u.pop()
			if err != nil {
				return nil, err
			}
			s, err := u.persistent(pid)
			if err != nil {
				return nil, err
			}
			u.push(s)
		case opReduce:
			args, err := u.pop()
			if err != nil {
				return nil, err
			}
			fn, err := u.pop()
			if err != nil {
				return nil, err
			}
			v, err := u.reduce(fn, args)
			if err != nil {
				return nil, err
			}
			u.push(v)
		case opBuild:
			state, err := u.pop()
			if err != nil {
				return nil, err
			}
			inst, err := u.top()
			if err != nil {
				return nil, err
			}
			d, ok := inst.(*Dict)
			sd, ok2 := state.(*Dict)
			if !ok || !d.Ordered || !ok2 {
				return nil, badf("BUILD on %s is not supported (byte %d)", typeName(inst), u.pos)
			}
			if d.Attrs == nil {
				d.Attrs = &Dict{}
			}
			for _, e := range sd.Entries {
				d.Attrs.Set(e.Key, e.Value)
			}
		default:
			return nil, badf("pickle opcode 0x%02x (%q) at byte %d is not supported", c, rune(c), u.pos-1)
		}
		if len(u.stack) > len(u.data)+16 {
			return nil, badf("pickle stack overflow")
		}
	}
}

// decodeLong is pickle.decode_long for values that fit in int64.
func decodeLong(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) > 8 {
		// allow sign-extension bytes beyond 8
		ext := byte(0)
		if b[7]&0x80 != 0 {
			ext = 0xff
		}
		for _, x := range b[8:] {
			if x != ext {
				return 0, badf("integer does not fit in int64")
			}
		}
		b = b[:8]
	}
	var w [8]byte
	copy(w[:], b)
	if b[len(b)-1]&0x80 != 0 {
		for k := len(b); k < 8; k++ {
			w[k] = 0xff
		}
	}
	return int64(bin.LittleEndian.Uint64(w[:])), nil
}

func (u *unpickler) persistent(pid any) (*storageRef, error) {
	t, ok := pid.(Tuple)
	if !ok || len(t) != 5 {
		return nil, badf("persistent id is not a ('storage', class, key, location, numel) tuple")
	}
	if s, _ := t[0].(string); s != "storage" {
		return nil, badf("persistent id of kind %v is not supported", t[0])
	}
	g, ok := t[1].(pyGlobal)
	if !ok || g.module != "torch" || !strings.HasSuffix(g.name, "Storage") {
		return nil, badf("persistent id has storage class %v", t[1])
	}
	key, ok := t[2].(string)
	if !ok {
		return nil, badf("persistent id has key %v", t[2])
	}
	if _, ok := t[3].(string); !ok {
		return nil, badf("persistent id has location %v", t[3])
	}
	n, ok := asInt(t[4])
	if !ok || n < 0 {
		return nil, badf("persistent id has size %v", t[4])
	}
	return &storageRef{key: key, dtype: g.dtype, numel: n}, nil
}

func (u *unpickler) reduce(fn, args any) (any, error) {
	g, ok := fn.(pyGlobal)
	if !ok {
		return nil, badf("REDUCE on %s", typeName(fn))
	}
	a, ok := args.(Tuple)
	if !ok {
		return nil, badf("REDUCE %v: arguments are %s, not a tuple", g, typeName(args))
	}
	switch g.String() {
	case "collections.OrderedDict":
		if len(a) != 0 {
			return nil, badf("OrderedDict with arguments is not supported")
		}
		return &Dict{Ordered: true}, nil
	case "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor":
		if len(a) < 4 || len(a) > 7 {
			return nil, badf("%v takes 4 to 7 arguments, got %d", g, len(a))
		}
		grad := false
		if len(a) >= 5 {
			grad, _ = a[4].(bool)
		}
		return u.loader.tensor(a[0], a[1], a[2], a[3], grad)
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		if len(a) < 2 {
			return nil, badf("%v takes at least 2 arguments", g)
		}
		t, ok := a[0].(*lazyTensor)
		if !ok {
			return nil, badf("%v of %s", g, typeName(a[0]))
		}
		if grad, _ := a[1].(bool); grad {
			t.grad = true
		}
		return t, nil
	case "torch.device":
		if len(a) < 1 || len(a) > 2 {
			return nil, badf("torch.device takes 1 or 2 arguments")
		}
		s, ok := a[0].(string)
		if !ok {
			return nil, badf("torch.device of %s", typeName(a[0]))
		}
		if len(a) == 2 {
			i, ok := asInt(a[1])
			if !ok {
				return nil, badf("torch.device index %v", a[1])
			}
			s = fmt.Sprintf("%s:%d", s, i)
		}
		d, err := torch.ParseDevice(s)
		if err != nil {
			return nil, badf("%v", err)
		}
		return d, nil
	}
	return nil, badf("cannot call %v", g)
}

// finish turns in-construction lists into []any, refusing cycles, and
// reads the storages of the tensors in v (each once: a tensor the pickle
// names twice is one *torch.Tensor in the result, as in Python).
func (l *storageLoader) finish(v any, depth int, active map[any]bool) (any, error) {
	if depth > maxDepth {
		return nil, badf("containers nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case *pyList:
		if active[x] {
			return nil, badf("a list contains itself")
		}
		active[x] = true
		defer delete(active, x)
		out := make([]any, len(x.items))
		for k, e := range x.items {
			var err error
			if out[k], err = l.finish(e, depth+1, active); err != nil {
				return nil, err
			}
		}
		return out, nil
	case Tuple:
		out := make(Tuple, len(x))
		for k, e := range x {
			var err error
			if out[k], err = l.finish(e, depth+1, active); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *Dict:
		if active[x] {
			return nil, badf("a dict contains itself")
		}
		active[x] = true
		defer delete(active, x)
		for k := range x.Entries {
			var err error
			if x.Entries[k].Value, err = l.finish(x.Entries[k].Value, depth+1, active); err != nil {
				return nil, err
			}
		}
		if x.Attrs != nil {
			a, err := l.finish(x.Attrs, depth+1, active)
			if err != nil {
				return nil, err
			}
			x.Attrs = a.(*Dict)
		}
		return x, nil
	case pyGlobal:
		if x.isDType {
			return x.dtype, nil
		}
		return nil, badf("the file holds the Python object %v, which torchfit does not load", x)
	case *storageRef:
		return nil, badf("a bare storage (not inside a tensor) is not supported")
	case *lazyTensor:
		if l.describe {
			return l.describeTensor(x)
		}
		return l.make(x)
	}
	return v, nil
}

// storageLoader reads storage records into CPU tensors, once per key; or,
// describing, checks them without keeping their data.
type storageLoader struct {
	files    map[string]*zip.File
	prefix   string
	size     int64 // the file's size (records can't be larger)
	storages map[string]*torch.Tensor
	made     map[*lazyTensor]*torch.Tensor
	created  []*torch.Tensor // results (freed on error)

	describe  bool                        // tensors become *TensorInfo
	verified  map[string]torch.DType      // storages whose records were read through
	described map[*lazyTensor]*TensorInfo // each tensor described once
}

// open opens s's storage record, checked against s's size; name is the
// record's, for errors.
func (l *storageLoader) open(s *storageRef) (rc io.ReadCloser, name string, err error) {
	name = l.prefix + "data/" + s.key
	f, ok := l.files[name]
	if !ok {
		return nil, name, badf("storage record %q is missing", name)
	}
	es := int64(s.dtype.Size())
	if es == 0 {
		return nil, name, badf("storage %q has an unsupported dtype", s.key)
	}
	if s.numel > math.MaxInt64/es {
		return nil, name, badf("storage %q declares %d elements", s.key, s.numel)
	}
	n := s.numel * es
	if f.UncompressedSize64 != uint64(n) {
		return nil, name, badf("storage record %q holds %d bytes; %d %v elements need %d", name, f.UncompressedSize64, s.numel, s.dtype, n)
	}
	if f.Method != zip.Store || f.CompressedSize64 != f.UncompressedSize64 || int64(f.CompressedSize64) > l.size {
		return nil, name, badf("storage record %q is compressed or larger than the file", name)
	}
	if rc, err = f.Open(); err != nil {
		return nil, name, badf("storage record %q: %v", name, err)
	}
	return rc, name, nil
}

// describeTensor checks lt's storage record to its end (its size and its
// checksum: reading it later cannot fail on the file's account) without
// keeping its bytes, and returns lt's shape and dtype.
func (l *storageLoader) describeTensor(lt *lazyTensor) (*TensorInfo, error) {
	if d, ok := l.described[lt]; ok {
		return d, nil
	}
	s := lt.s
	if dt, ok := l.verified[s.key]; ok {
		if dt != s.dtype {
			return nil, badf("storage %q is used with two dtypes", s.key)
		}
	} else {
		rc, name, err := l.open(s)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, rc) // EOF verifies the CRC
		rc.Close()
		if err != nil {
			return nil, badf("storage record %q: %v", name, err)
		}
		l.verified[s.key] = s.dtype
	}
	d := &TensorInfo{Shape: slices.Clone(lt.shape), DType: s.dtype}
	l.described[lt] = d
	return d, nil
}

func (l *storageLoader) storage(s *storageRef) (*torch.Tensor, error) {
	if t, ok := l.storages[s.key]; ok {
		if t.DType() != s.dtype {
			return nil, badf("storage %q is used with two dtypes", s.key)
		}
		return t, nil
	}
	rc, name, err := l.open(s)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// The elements go from the file straight into the tensor's memory.
	t, err := torch.FromReader(rc, []int64{s.numel}, s.dtype)
	var terr *torch.Error
	if errors.As(err, &terr) { // allocating it failed: not the file's fault
		return nil, fmt.Errorf("storage %q: %w", s.key, err)
	}
	if err != nil {
		return nil, badf("storage record %q: %v", name, err)
	}
	l.storages[s.key] = t
	var one [1]byte
	if _, err := rc.Read(one[:]); !errors.Is(err, io.EOF) { // EOF verifies the CRC
		return nil, badf("storage record %q: checksum: %v", name, err)
	}
	return t, nil
}

func tupleInts(v any, what string) ([]int64, error) {
	t, ok := v.(Tuple)
	if !ok {
		return nil, badf("tensor %s is %s, not a tuple", what, typeName(v))
	}
	if len(t) > torch.MaxDims {
		return nil, badf("tensor has %d dimensions; torchfit supports %d", len(t), torch.MaxDims)
	}
	out := make([]int64, len(t))
	for k, x := range t {
		i, ok := asInt(x)
		if !ok || i < 0 {
			return nil, badf("tensor %s %v is invalid", what, v)
		}
		out[k] = i
	}
	return out, nil
}

// tensor implements _rebuild_tensor_v2(storage, offset, size, stride, ...).
func (l *storageLoader) tensor(storage, offset, size, stride any, grad bool) (any, error) {
	s, ok := storage.(*storageRef)
	if !ok {
		return nil, badf("tensor storage is %s", typeName(storage))
	}
	off, ok := asInt(offset)
	if !ok || off < 0 {
		return nil, badf("tensor storage offset %v is invalid", offset)
	}
	shape, err := tupleInts(size, "size")
	if err != nil {
		return nil, err
	}
	strides, err := tupleInts(stride, "stride")
	if err != nil {
		return nil, err
	}
	if len(strides) != len(shape) {
		return nil, badf("tensor size %v and stride %v differ in length", shape, strides)
	}
	// Elements touched: offset + sum((size-1)*stride) + 1 must fit the storage.
	numel, extent, dense := int64(1), off, int64(1)
	for k := range shape {
		if max(shape[k], 1) > math.MaxInt64/dense {
			return nil, badf("tensor size %v overflows", shape)
		}
		dense *= max(shape[k], 1)
		if shape[k] == 0 {
			numel = 0
			continue
		}
		numel *= shape[k]
		if strides[k] != 0 && shape[k]-1 > (math.MaxInt64-extent)/strides[k] {
			return nil, badf("tensor size %v with stride %v overflows", shape, strides)
		}
		extent += (shape[k] - 1) * strides[k]
	}
	if numel > 0 && extent >= s.numel {
		return nil, badf("tensor of size %v, stride %v, offset %d needs %d elements; storage %q has %d",
			shape, strides, off, extent+1, s.key, s.numel)
	}
	return &lazyTensor{s: s, off: off, shape: shape, strides: strides, numel: numel, grad: grad}, nil
}

// make reads lt's storage (once per storage) and returns lt as a view of
// it, as Python's _rebuild_tensor_v2 makes.
func (l *storageLoader) make(lt *lazyTensor) (*torch.Tensor, error) {
	if t, ok := l.made[lt]; ok {
		return t, nil
	}
	st, err := l.storage(lt.s)
	if err != nil {
		return nil, err
	}
	var t *torch.Tensor
	if e := torch.Try(func() {
		if lt.numel == 0 {
			t = torch.Empty(lt.shape, lt.s.dtype)
		} else {
			t = torch.CallOp("aten::as_strided", "", st, lt.shape, lt.strides, lt.off)[0].(*torch.Tensor)
		}
		if lt.grad && lt.s.dtype.IsFloat() {
			t.SetRequiresGrad(true)
		}
	}); e != nil {
		return nil, fmt.Errorf("tensor: %w", e)
	}
	l.created = append(l.created, t)
	l.made[lt] = t
	return t, nil
}

// decode reads a torch.save zip file: all of it when parts is nil, else
// only the top-level dict's entries whose keys are in parts (their tensors'
// storages alone are read), and then keys are the dict's keys, every one.
// describe makes each tensor a *TensorInfo, its record checked, not kept.
func decode(r io.ReaderAt, size int64, parts []string, describe bool) (result any, keys []any, err error) {
	if size == 0 {
		return nil, nil, badf("file is empty")
	}
	var head [4]byte
	if n, _ := r.ReadAt(head[:], 0); n >= 2 && head[0] == 0x80 && head[1] <= 5 {
		return nil, nil, ErrLegacyFormat
	} else if n >= 1 && n < 4 {
		return nil, nil, badf("file is %d bytes long", size)
	}
	if n, _ := r.ReadAt(head[:], 0); n == 4 && string(head[:]) != "PK\x03\x04" && string(head[:]) != "PK\x05\x06" {
		return nil, nil, badf("not a zip file (torch.save files are zip archives)")
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, nil, badf("%v", err)
	}
	files := make(map[string]*zip.File, len(zr.File))
	var pkl *zip.File
	prefix := ""
	for _, f := range zr.File {
		files[f.Name] = f
		if pkl == nil && strings.HasSuffix(f.Name, "/data.pkl") && strings.Count(f.Name, "/") == 1 {
			pkl = f
			prefix = strings.TrimSuffix(f.Name, "data.pkl")
		}
	}
	if pkl == nil {
		if _, ok := files["constants.pkl"]; ok || len(zr.File) > 0 && strings.HasSuffix(zr.File[0].Name, "constants.pkl") {
			return nil, nil, badf("this is a TorchScript archive (torch.jit.save / C++ torch::save), not torch.save")
		}
		return nil, nil, badf("the zip has no <archive>/data.pkl record")
	}
	if f, ok := files[prefix+"byteorder"]; ok {
		b, err := readSmall(f, 16)
		if err != nil {
			return nil, nil, err
		}
		if string(b) != "little" {
			return nil, nil, badf("byte order %q is not supported", b)
		}
	}
	data, err := readSmall(pkl, maxPickle)
	if err != nil {
		return nil, nil, err
	}
	l := &storageLoader{files: files, prefix: prefix, size: size, storages: map[string]*torch.Tensor{}, made: map[*lazyTensor]*torch.Tensor{},
		describe: describe, verified: map[string]torch.DType{}, described: map[*lazyTensor]*TensorInfo{}}
	defer func() {
		for _, t := range l.storages {
			t.Free() // views keep what they use alive
		}
		if err != nil {
			for _, t := range l.created {
				t.Free()
			}
		}
	}()
	u := &unpickler{data: data, memo: map[uint32]any{}, dicts: map[*Dict]map[any]int{}, loader: l}
	v, err := u.run()
	if err != nil {
		return nil, nil, err
	}
	if parts != nil {
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, badf("the file holds %s, not a dict of parts", typeName(v))
		}
		kept := d.Entries[:0]
		for _, e := range d.Entries {
			keys = append(keys, e.Key)
			if k, ok := e.Key.(string); ok && slices.Contains(parts, k) {
				kept = append(kept, e)
			}
		}
		clear(d.Entries[len(kept):]) // what was left out is garbage, never read
		d.Entries = kept
	}
	result, err = l.finish(v, 0, map[any]bool{})
	return result, keys, err
}

// readSmall reads a whole record of at most max bytes.
func readSmall(f *zip.File, max int64) ([]byte, error) {
	n := f.UncompressedSize64
	if n > uint64(max) || (f.Method == zip.Store && n != f.CompressedSize64) ||
		n > f.CompressedSize64*1100+1024 { // deflate expands at most ~1032x
		return nil, badf("record %q declares %d bytes", f.Name, n)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, badf("record %q: %v", f.Name, err)
	}
	defer rc.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, badf("record %q: %v", f.Name, err)
	}
	var one [1]byte
	if _, err := rc.Read(one[:]); !errors.Is(err, io.EOF) {
		return nil, badf("record %q: checksum: %v", f.Name, err)
	}
	return b, nil
}

// count reads an opcode's unsigned argument (a memo index or a length):
// one byte, or four for the LONG_/non-SHORT_ opcodes.
func (u *unpickler) count(long bool) (uint32, error) {
	if long {
		return u.u32()
	}
	b, err := u.byte1()
	return uint32(b), err
}
