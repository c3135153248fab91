package torch

import (
	"math"
	"strconv"
	"strings"
)

// Printing follows Python PyTorch's repr (torch/_tensor_str.py, default
// print options): precision 4, threshold 1000, edge items 3, line width 80.
const (
	printPrecision = 4
	printThreshold = 1000
	printEdgeItems = 3
	printLineWidth = 80
)

// String prints t as Python PyTorch's repr does:
//
//	tensor([[1., 2.],
//	        [3., 4.]])
//
// with a dtype suffix when it is not float32, int64 or bool, the device when
// it is not the CPU and requires_grad=True when autograd records t. Tensors
// of more than 1000 elements are summarised with "...". Where Python prints
// grad_fn=<...> for a non-leaf, String prints requires_grad=True.
func (t *Tensor) String() string {
	if t == nil {
		return "tensor(nil)"
	}
	if t.Freed() {
		return "tensor(freed)"
	}
	var s string
	if err := Try(func() { s = t.format() }); err != nil {
		return "tensor(<" + err.Error() + ">)"
	}
	return s
}

func (t *Tensor) format() string {
	const prefix = "tensor("
	indent := len(prefix)
	info, shape := t.info("String")
	dims := append([]int64(nil), shape[:info.NDim]...)
	dt := DType(info.DType)
	dev := Device{Type: DeviceType(info.DeviceType), Index: int(info.DeviceIndex)}

	var suffixes []string
	if dev.Type != DeviceCPU {
		suffixes = append(suffixes, "device='"+dev.String()+"'")
	}
	var body string
	if info.Numel == 0 {
		if len(dims) != 1 {
			suffixes = append(suffixes, "size="+pyTuple(dims))
		}
		if dt != Float32 {
			suffixes = append(suffixes, "dtype=torch."+dt.String())
		}
		body = "[]"
	} else {
		if dt != Float32 && dt != Int64 && dt != Bool {
			suffixes = append(suffixes, "dtype=torch."+dt.String())
		}
		body = formatBody(t, dims, dt, indent)
	}
	if info.RequiresGrad != 0 {
		suffixes = append(suffixes, "requires_grad=True")
	}
	return addSuffixes(prefix+body, suffixes, indent)
}

func pyTuple(xs []int64) string {
	parts := make([]string, len(xs))
	for k, x := range xs {
		parts[k] = strconv.FormatInt(x, 10)
	}
	if len(xs) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// addSuffixes is _add_suffixes: suffixes go on the last line while it stays
// within the line width.
func addSuffixes(s string, suffixes []string, indent int) string {
	var b strings.Builder
	b.WriteString(s)
	last := len(s) - strings.LastIndex(s, "\n") + 1
	for _, suf := range suffixes {
		if last+len(suf)+2 > printLineWidth {
			b.WriteString(",\n" + strings.Repeat(" ", indent) + suf)
			last = indent + len(suf)
		} else {
			b.WriteString(", " + suf)
			last += len(suf) + 2
		}
	}
	b.WriteString(")")
	return b.String()
}

// formatBody prints the elements. Only what is shown leaves libtorch: a
// summarised tensor is cut down to its edge items first.
func formatBody(t *Tensor, dims []int64, dt DType, indent int) string {
	summarize := numel(dims) > printThreshold
	var vals []float64
	var ints []int64
	shown := append([]int64(nil), dims...)
	Tidy(func() {
		NoGrad(func() {
			src := t.Detach()
			if src.Device().Type != DeviceCPU {
				src = src.ToDevice(CPU)
			}
			if summarize {
				for d, n := range dims {
					if n > 2*printEdgeItems {
						src = Cat([]*Tensor{
							src.Narrow(int64(d), 0, printEdgeItems),
							src.Narrow(int64(d), n-printEdgeItems, printEdgeItems),
						}, int64(d))
						shown[d] = 2 * printEdgeItems
					}
				}
			}
			if dt.IsFloat() {
				vals = src.Float64s()
			} else {
				ints = src.Int64s()
			}
		})
	})
	f := newFormatter(dt, vals, ints)
	p := printer{f: f, dims: dims, shown: shown, summarize: summarize, vals: vals, ints: ints}
	if len(dims) == 0 {
		return f.format(0, vals, ints)
	}
	return p.tensor(0, 0, indent)
}

func numel(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// formatter is _Formatter: one width and one mode for all elements.
type formatter struct {
	float, intMode, sci bool
	bool                bool
	width               int
}

func newFormatter(dt DType, vals []float64, ints []int64) *formatter {
	f := &formatter{float: dt.IsFloat(), intMode: true, width: 1, bool: dt == Bool}
	if !f.float {
		for k := range ints {
			f.width = max(f.width, len(f.format(k, nil, ints)))
		}
		return f
	}
	var nz []float64
	for _, v := range vals {
		if v != 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
			nz = append(nz, v)
		}
	}
	if len(nz) == 0 {
		return f
	}
	lo, hi := math.Inf(1), 0.0
	for _, v := range nz {
		a := math.Abs(v)
		lo, hi = math.Min(lo, a), math.Max(hi, a)
		if v != math.Ceil(v) {
			f.intMode = false
		}
	}
	if f.intMode {
		if hi/lo > 1000 || hi > 1e8 {
			f.sci = true
			for _, v := range nz {
				f.width = max(f.width, len(strconv.FormatFloat(v, 'e', printPrecision, 64)))
			}
		} else {
			for _, v := range nz {
				f.width = max(f.width, len(strconv.FormatFloat(v, 'f', 0, 64))+1)
			}
		}
		return f
	}
	if hi/lo > 1000 || hi > 1e8 || lo < 1e-4 {
		f.sci = true
		for _, v := range nz {
			f.width = max(f.width, len(strconv.FormatFloat(v, 'e', printPrecision, 64)))
		}
	} else {
		for _, v := range nz {
			f.width = max(f.width, len(strconv.FormatFloat(v, 'f', printPrecision, 64)))
		}
	}
	return f
}

// format prints element k, padded to the common width.
func (f *formatter) format(k int, vals []float64, ints []int64) string {
	var s string
	switch {
	case f.bool:
		if ints[k] != 0 {
			s = "True"
		} else {
			s = "False"
		}
	case !f.float:
		s = strconv.FormatInt(ints[k], 10)
	default:
		v := vals[k]
		switch {
		case math.IsNaN(v):
			s = "nan"
		case math.IsInf(v, 1):
			s = "inf"
		case math.IsInf(v, -1):
			s = "-inf"
		case f.sci:
			s = strconv.FormatFloat(v, 'e', printPrecision, 64)
		case f.intMode:
			s = strconv.FormatFloat(v, 'f', 0, 64) + "."
		default:
			s = strconv.FormatFloat(v, 'f', printPrecision, 64)
		}
	}
	if n := f.width - len(s); n > 0 {
		s = strings.Repeat(" ", n) + s
	}
	return s
}

// printer walks the (possibly cut down) elements in row-major order.
type printer struct {
	f           *formatter
	dims, shown []int64
	summarize   bool
	vals        []float64
	ints        []int64
}

// tensor prints the sub-tensor at dimension d whose first element is at
// flat offset off of the shown data.
func (p *printer) tensor(d int, off int64, indent int) string {
	inner := int64(1)
	for _, s := range p.shown[d+1:] {
		inner *= s
	}
	cut := p.summarize && p.dims[d] > 2*printEdgeItems
	if d == len(p.dims)-1 {
		var data []string
		for k := int64(0); k < p.shown[d]; k++ {
			if cut && k == printEdgeItems {
				data = append(data, " ...")
			}
			data = append(data, p.f.format(int(off+k), p.vals, p.ints))
		}
		perLine := max(1, (printLineWidth-indent)/(p.f.width+2))
		var lines []string
		for k := 0; k < len(data); k += perLine {
			lines = append(lines, strings.Join(data[k:min(k+perLine, len(data))], ", "))
		}
		return "[" + strings.Join(lines, ",\n"+strings.Repeat(" ", indent+1)) + "]"
	}
	var slices []string
	for k := int64(0); k < p.shown[d]; k++ {
		if cut && k == printEdgeItems {
			slices = append(slices, "...")
		}
		slices = append(slices, p.tensor(d+1, off+k*inner, indent+1))
	}
	sep := "," + strings.Repeat("\n", len(p.dims)-d-1) + strings.Repeat(" ", indent+1)
	return "[" + strings.Join(slices, sep) + "]"
}
