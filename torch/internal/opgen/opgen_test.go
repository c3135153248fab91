package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

const (
	listPath = "../../ops.list"
	genPath  = "../../ops_gen.go"
	// listLibtorch is the libtorch whose schema text ops.list holds.
	listMajor, listMinor = 1, 13
)

// TestGeneratedUpToDate fails when ops.list was edited without running
// go generate ./torch (or ops_gen.go was edited by hand).
func TestGeneratedUpToDate(t *testing.T) {
	src, err := os.ReadFile(listPath)
	require.NoError(t, err)
	want, err := Generate("ops.list", "torch", src)
	require.NoError(t, err)
	got, err := os.ReadFile(genPath)
	require.NoError(t, err)
	require.True(t, string(want) == string(got), "torch/ops_gen.go is out of date with torch/ops.list: run go generate ./torch")
}

// TestRunCheck: the -check mode reports a stale file and leaves it alone.
func TestRunCheck(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "ops.list")
	out := filepath.Join(dir, "ops_gen.go")
	require.NoError(t, os.WriteFile(list, []byte("// Neg returns −t.\nt.Neg()  aten::neg(Tensor self) -> Tensor\n"), 0o644))
	require.NoError(t, run(list, out, "torch", false))
	require.NoError(t, run(list, out, "torch", true), "fresh output passes the check")
	require.NoError(t, os.WriteFile(list, []byte("// Abs returns |t|.\nt.Abs()  aten::abs(Tensor self) -> Tensor\n"), 0o644))
	before, err := os.ReadFile(out)
	require.NoError(t, err)
	require.ErrorContains(t, run(list, out, "torch", true), "out of date")
	after, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, before, after, "-check writes nothing")
	require.Error(t, run(filepath.Join(dir, "missing.list"), out, "torch", false))
}

// TestSchemasMatchLibtorch resolves every listed op in the libtorch the
// tests link and compares its schema with the list's: the same text on
// the libtorch the list was written from; on another, every argument a
// wrapper passes at the same position with the same name and kind, the
// others defaulted, and the same results.
func TestSchemasMatchLibtorch(t *testing.T) {
	src, err := os.ReadFile(listPath)
	require.NoError(t, err)
	entries, err := ParseList("ops.list", src)
	require.NoError(t, err)
	major, minor, _ := capi.Version()
	exact := major == listMajor && minor == listMinor
	for _, e := range entries {
		w, err := resolve(e)
		require.NoError(t, err)
		op, err := capi.FindOp(e.Schema.Name, e.Schema.Overload)
		require.NoError(t, err, "line %d: %s", e.Line, e.Name)
		text := capi.Schema(op)
		if exact {
			require.Equal(t, text, e.Schema.Text, "ops.list:%d: %s: libtorch's schema", e.Line, e.Name)
		}
		real, err := ParseSchema(text)
		require.NoError(t, err, "libtorch's schema %s", text)
		require.NoError(t, compatible(w, real), "ops.list:%d: %s: libtorch has %s", e.Line, e.Name, text)
	}
}

// TestCompatible: what another libtorch may change in a schema without
// breaking a wrapper, and what it may not.
func TestCompatible(t *testing.T) {
	e, err := parseEntry("t.f(o, n, sizes)  aten::f(Tensor self, Tensor other, int n, int[] sizes, bool flag=False) -> Tensor")
	require.NoError(t, err)
	w, err := resolve(e)
	require.NoError(t, err)
	cases := []struct {
		real string
		ok   bool
	}{
		{"aten::f(Tensor self, Tensor other, int n, int[] sizes, bool flag=False) -> Tensor", true},
		{"aten::f(Tensor self, Tensor other, SymInt n, SymInt[2] sizes) -> Tensor", true},
		{"aten::f(Tensor self, Tensor other, int n, int[] sizes, bool flag=False, *, int? extra=None) -> Tensor", true},
		{"aten::f(Tensor self, Tensor other, int n, int[] sizes, bool flag) -> Tensor", false},
		{"aten::f(Tensor self, Tensor other, int m, int[] sizes) -> Tensor", false},
		{"aten::f(Tensor self, Tensor other, float n, int[] sizes) -> Tensor", false},
		{"aten::f(Tensor self, Tensor other, Scalar n, int[] sizes) -> Tensor", true},
		{"aten::f(Tensor self, Tensor other, int n, Scalar[] sizes) -> Tensor", false},
		{"aten::f(Tensor self, Tensor other, int n) -> Tensor", false},
		{"aten::f(Tensor self, Tensor other, int n, int[] sizes) -> (Tensor, Tensor)", false},
		{"aten::f(Tensor self, Tensor other, int n, int[] sizes) -> Tensor[]", false},
	}
	for _, c := range cases {
		real, err := ParseSchema(c.real)
		require.NoError(t, err)
		require.Equal(t, c.ok, compatible(w, real) == nil, c.real)
	}
}

// compatible checks that a wrapper resolved against the listed schema
// passes the right values to the real one.
func compatible(w *wrapper, real *Schema) error {
	kind := func(t Type) string {
		b := t.Base
		if b == "SymInt" {
			b = "int"
		}
		if t.List {
			b += "[]"
		}
		return b
	}
	for j := 0; j < w.nPassed; j++ {
		if j >= len(real.Args) {
			return errors.New("fewer arguments than the wrapper passes")
		}
		a, r := w.Schema.Args[j], real.Args[j]
		// A Scalar takes the int a wrapper passes (2.x widened var's and
		// std's correction from int? to Scalar?).
		widened := kind(a.Type) == "int" && kind(r.Type) == "Scalar"
		if a.Name != r.Name || (kind(a.Type) != kind(r.Type) && !widened) {
			return errors.New("argument " + a.Type.String() + " " + a.Name + " is now " + r.Type.String() + " " + r.Name)
		}
	}
	for _, r := range real.Args[w.nPassed:] {
		if !r.HasDefault {
			return errors.New("argument " + r.Name + " has no default")
		}
	}
	if len(real.Rets) != len(w.Schema.Rets) {
		return errors.New("a different number of results")
	}
	for k, r := range real.Rets {
		if kind(r.Type) != kind(w.Schema.Rets[k].Type) {
			return errors.New("result " + r.Type.String() + " differs")
		}
	}
	return nil
}

func TestParseSchema(t *testing.T) {
	s, err := ParseSchema(`aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)`)
	require.NoError(t, err)
	require.Equal(t, "aten::index_put_", s.Name)
	require.Equal(t, "", s.Overload)
	require.Len(t, s.Args, 4)
	require.Equal(t, Type{Base: "Tensor", Alias: "a!"}, s.Args[0].Type)
	require.Equal(t, Type{Base: "Tensor", ElemOpt: true, List: true}, s.Args[1].Type)
	require.Equal(t, "False", s.Args[3].Default)
	require.True(t, s.Rets[0].Type.Mutates())

	s, err = ParseSchema(`aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[1, 2], *, int[1]? dim=None, str approximate="a,b") -> (Tensor values, Tensor(a -> *)[] parts)`)
	require.NoError(t, err)
	require.Len(t, s.Args, 5)
	require.Equal(t, "[1, 2]", s.Args[2].Default)
	require.True(t, s.Args[3].KwOnly)
	require.Equal(t, Type{Base: "int", List: true, Size: "1", Optional: true}, s.Args[3].Type)
	require.Equal(t, `"a,b"`, s.Args[4].Default)
	require.Equal(t, []Ret{{Type: Type{Base: "Tensor"}, Name: "values"}, {Type: Type{Base: "Tensor", Alias: "a -> *", List: true}, Name: "parts"}}, s.Rets)

	s, err = ParseSchema(`aten::_amp_update(Tensor(a!)[] self) -> ()`)
	require.NoError(t, err)
	require.Empty(t, s.Rets)

	for _, bad := range []string{
		"add(Tensor self) -> Tensor",                 // no namespace
		"aten::add(Tensor self -> Tensor",            // unbalanced
		"aten::add(Tensor self)",                     // no results
		"aten::add(Tensor self, Tensor) -> Tensor",   // unnamed argument
		"aten::add(Tensor self, int x=) -> Tensor",   // empty default
		"aten::add(Tensor self) -> Tensor extra",     // trailing text
		"aten::add(Tensor self) -> (Tensor a) extra", // trailing text
		"aten::a-b(Tensor self) -> Tensor",           // bad name
	} {
		_, err := ParseSchema(bad)
		require.Error(t, err, bad)
	}
}

// gen runs the generator on a one-entry list.
func gen(t *testing.T, entry string) (string, error) {
	t.Helper()
	out, err := Generate("test.list", "torch", []byte(entry+"\n"))
	return string(out), err
}

func TestGenerateBodies(t *testing.T) {
	cases := []struct {
		name, entry string
		want        []string // lines of the output
	}{
		{"method", "// Add adds.\nt.Add(o, alpha)  aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
			[]string{"var opAddTensor = defOp(\"aten::add\", \"Tensor\")", "func (t *Tensor) Add(o *Tensor, alpha float64) *Tensor {", "\treturn c.t(t).t(o).scalar(alpha).out1(opAddTensor)"}},
		{"skipped default becomes def", "// Emb looks up.\nEmb(w, ids, sparse=True)  aten::embedding(Tensor weight, Tensor indices, int padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
			[]string{"func Emb(w, ids *Tensor) *Tensor {", "\treturn c.t(w).t(ids).def().def().b(true).out1(opEmbedding)"}},
		{"constant", "// F floors.\nt.F(o, rounding_mode=\"floor\")  aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
			[]string{"\treturn c.t(t).t(o).str(\"floor\").out1(opDivTensorMode)"}},
		{"none constant", "// S sums.\nt.S(dtype=None)  aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
			[]string{"\treturn c.t(t).none().out1(opSum)"}},
		{"as float", "// D divides.\nt.D(s:float)  aten::div.Scalar(Tensor self, Scalar other) -> Tensor",
			[]string{"func (t *Tensor) D(s float64) *Tensor {", "\treturn c.t(t).f(s).out1(opDivScalar)"}},
		{"variadic", "// V views.\nt.V(shape...)  aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
			[]string{"func (t *Tensor) V(shape ...int64) *Tensor {", "\treturn c.t(t).ints(shape...).out1(opView)"}},
		{"reduction", "// L is a loss.\nL(x, y, red)  aten::l1_loss(Tensor self, Tensor target, int reduction=1) -> Tensor",
			[]string{"func L(x, y *Tensor, red Reduction) *Tensor {", "\treturn c.t(x).t(y).i(int64(red)).out1(opL1Loss)"}},
		{"in place", "// AddIn adds in place.\nt.AddIn(o)  aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
			[]string{"var opAdd_Tensor = defOp(\"aten::add_\", \"Tensor\")", "\treturn c.t(t).t(o).inplace(opAdd_Tensor, t)"}},
		{"in place function", "// U updates.\nU(s, g)  aten::_amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf=None) -> Tensor(a!)",
			[]string{"func U(s, g *Tensor) {", "\tc.t(s).t(g).run(opAmpUpdateScale_, nil)"}},
		{"tuple", "// M maxes.\nt.M(dim)  aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
			[]string{"func (t *Tensor) M(dim int64) (values, indices *Tensor) {", "\tr := c.t(t).i(dim).outN(opMaxDim, 2)", "\treturn r[0], r[1]"}},
		{"list result", "// C chunks.\nt.C(n)  aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]",
			[]string{"func (t *Tensor) C(n int64) []*Tensor {", "\treturn c.t(t).i(n).outList(opChunk)"}},
		{"bool result", "// E compares.\nt.E(o)  aten::equal(Tensor self, Tensor other) -> bool",
			[]string{"func (t *Tensor) E(o *Tensor) bool {", "\treturn c.t(t).t(o).outScalar(opEqual).I != 0"}},
		{"factory", "// Z makes zeros.\nZ(shape, opts...)  aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
			[]string{"func Z(shape []int64, opts ...Opt) *Tensor {", "\to := makeOptions(opts)", "\treturn o.finish(c.ints(shape...).tensorOpts(o).out1(opZeros))"}},
		{"like factory", "// ZL makes zeros.\nZL(x, opts...)  aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
			[]string{"\to := likeOptions(opts)", "\treturn o.finish(c.t(x).likeOpts(o).out1(opZerosLike))"}},
		{"unexported, no doc", "t.to(d, dt)  aten::to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False) -> Tensor(a)",
			[]string{"func (t *Tensor) to(d Device, dt DType) *Tensor {", "\treturn c.t(t).device(d).dtype(dt).out1(opToDevice)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := gen(t, c.entry)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(out, "// Code generated by"), "header")
			require.Contains(t, out, "DO NOT EDIT.\n")
			lines := strings.Split(out, "\n")
			for _, w := range c.want {
				require.Contains(t, lines, w, "output:\n%s", out)
			}
			if doc, _, ok := strings.Cut(c.entry, "\n"); ok {
				require.Contains(t, lines, doc, "doc comment carried")
			}
		})
	}
}

// TestGenerateErrors: a fault in the list is an error naming its line.
func TestGenerateErrors(t *testing.T) {
	const add = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
	cases := []struct {
		name, list string
		line       int
		msg        string
	}{
		{"no doc", "t.Add(o)  " + add, 1, "doc comment"},
		{"doc of another name", "// Sub subtracts.\nt.Add(o)  " + add, 2, "doc comment"},
		{"dangling doc", "// Add adds.\n\nt.Add(o)  " + add, 1, "not followed by an entry"},
		{"too many params", "// Add adds.\nt.Add(o, a, b)  " + add, 2, "3 arguments"},
		{"unknown constant", "// Add adds.\nt.Add(o, beta=2)  " + add, 2, "no argument beta"},
		{"constant twice", "// Add adds.\nt.Add(o, other=2)  " + add, 2, "already bound"},
		{"constant type", "// Add adds.\nt.Add(o, alpha=\"x\")  " + add, 2, "does not fit"},
		{"float on a tensor", "// Add adds.\nt.Add(o:float)  " + add, 2, "not a Scalar"},
		{"variadic on a scalar", "// Add adds.\nt.Add(o, alpha...)  " + add, 2, "not a list"},
		{"variadic not last", "// V views.\nV(x, s..., y)  aten::foo(Tensor self, int[] size, Tensor y) -> Tensor", 2, "last parameter"},
		{"unbound required", "// F foos.\nF(x)  aten::foo(Tensor self, int n) -> Tensor", 2, "no default"},
		{"no Go type", "// F foos.\nF(x, g)  aten::foo(Tensor self, Generator? g=None) -> Tensor", 2, "no Go type"},
		{"reserved name", "// F foos.\nF(c)  aten::foo(Tensor self) -> Tensor", 2, "uses it for the call"},
		{"result name clash", "// F foos.\nF(values)  aten::foo(Tensor self) -> (Tensor values, Tensor indices)", 2, "uses it for a result"},
		{"scalar result", "// F foos.\nF(x)  aten::item(Tensor self) -> Scalar", 2, "hand-write"},
		{"duplicate", "// F foos.\nF(x)  aten::neg(Tensor self) -> Tensor\n// F foos.\nF(x)  aten::abs(Tensor self) -> Tensor", 4, "also defined at line 2"},
		{"one op, two schemas", "// F foos.\nF(x)  aten::neg(Tensor self) -> Tensor\n// G foos.\nG(x)  aten::neg(Tensor input) -> Tensor", 4, "schema differs"},
		{"keyword name", "// F foos.\nF(range)  aten::neg(Tensor self) -> Tensor", 2, "bad parameter"},
		{"duplicate param", "// F foos.\nF(x, x)  aten::add.Tensor(Tensor self, Tensor other) -> Tensor", 2, "named twice"},
		{"no schema", "// F foos.\nF(x)", 2, "no schema"},
		{"bad schema", "// F foos.\nF(x)  neg(Tensor self) -> Tensor", 2, "namespace"},
		{"receiver not a tensor", "// F foos.\nt.F()  aten::randperm(int n) -> Tensor", 2, "receiver"},
		{"in place on another arg", "// F foos.\nt.F(y)  aten::foo_(Tensor self, Tensor(a!) y) -> Tensor(a!)", 2, "not the receiver"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Generate("test.list", "torch", []byte(c.list+"\n"))
			var le *ListError
			require.True(t, errors.As(err, &le), "want a *ListError, got %v", err)
			require.Equal(t, c.line, le.Line, "%v", err)
			require.Contains(t, le.Msg, c.msg)
		})
	}
}
