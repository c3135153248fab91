// Package schema reads operator schemas as libtorch prints them
// ("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"):
// the op generator (torch/internal/opgen) and torch's checks of the
// arguments a call passes share it.
package schema

import (
	"fmt"
	"strings"
)

// Schema is a parsed ATen operator schema, as libtorch prints it:
//
//	aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
type Schema struct {
	Text     string // as written
	Name     string // qualified: aten::add
	Overload string // Tensor; "" for none
	Args     []Arg
	Rets     []Ret
}

// Arg is one schema argument.
type Arg struct {
	Type       Type
	Name       string
	Default    string // as written; meaningful when HasDefault
	HasDefault bool
	KwOnly     bool // after the "*" marker
}

// Ret is one result; Name is "" for unnamed results.
type Ret struct {
	Type Type
	Name string
}

// Type is a schema type such as Tensor(a!), int[1]?, Tensor?[] or Scalar.
type Type struct {
	Base     string // Tensor, int, SymInt, float, bool, str, Scalar, ScalarType, Device, ...
	Alias    string // a, a!, a -> *; "" for none
	ElemOpt  bool   // Tensor?[]: a list of optional elements
	List     bool
	Size     string // N of int[N]
	Optional bool   // the whole value may be None
}

func (t Type) String() string {
	var b strings.Builder
	b.WriteString(t.Base)
	if t.Alias != "" {
		b.WriteString("(" + t.Alias + ")")
	}
	if t.ElemOpt {
		b.WriteString("?")
	}
	if t.List {
		b.WriteString("[" + t.Size + "]")
	}
	if t.Optional {
		b.WriteString("?")
	}
	return b.String()
}

// Mutates reports an alias annotation that writes (Tensor(a!)).
func (t Type) Mutates() bool { return strings.HasSuffix(t.Alias, "!") }

// IsInt is true for int and SymInt (the same to a boxed call).
func (t Type) IsInt() bool { return t.Base == "int" || t.Base == "SymInt" }

// Parse parses a schema as libtorch prints it.
func Parse(text string) (*Schema, error) {
	s := &Schema{Text: text}
	open := strings.IndexByte(text, '(')
	if open < 0 {
		return nil, fmt.Errorf("schema %q: no argument list", text)
	}
	head := text[:open]
	if !strings.Contains(head, "::") {
		return nil, fmt.Errorf("schema %q: name needs a namespace (aten::)", text)
	}
	s.Name, s.Overload, _ = strings.Cut(head, ".")
	if !IsIdent(strings.ReplaceAll(s.Name, "::", "_")) || (s.Overload != "" && !IsIdent(s.Overload)) {
		return nil, fmt.Errorf("schema %q: bad name %q", text, head)
	}
	end, err := Matching(text, open)
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w", text, err)
	}
	kw := false
	for _, a := range SplitTop(text[open+1 : end]) {
		if a == "*" {
			kw = true
			continue
		}
		arg, err := parseArg(a)
		if err != nil {
			return nil, fmt.Errorf("schema %q: %w", text, err)
		}
		arg.KwOnly = kw
		s.Args = append(s.Args, arg)
	}
	rest := strings.TrimSpace(text[end+1:])
	ret, ok := strings.CutPrefix(rest, "->")
	if !ok {
		return nil, fmt.Errorf("schema %q: no \"->\" after the arguments", text)
	}
	s.Rets, err = parseRets(strings.TrimSpace(ret))
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w", text, err)
	}
	return s, nil
}

func parseRets(r string) ([]Ret, error) {
	if r == "()" {
		return nil, nil
	}
	if strings.HasPrefix(r, "(") {
		end, err := Matching(r, 0)
		if err != nil {
			return nil, err
		}
		if end != len(r)-1 {
			return nil, fmt.Errorf("text after the results: %q", r[end+1:])
		}
		var rets []Ret
		for _, part := range SplitTop(r[1:end]) {
			ty, rest, err := parseType(part)
			if err != nil {
				return nil, err
			}
			if rest != "" && !IsIdent(rest) {
				return nil, fmt.Errorf("bad result name %q", rest)
			}
			rets = append(rets, Ret{Type: ty, Name: rest})
		}
		return rets, nil
	}
	ty, rest, err := parseType(r)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, fmt.Errorf("text after the result type: %q", rest)
	}
	return []Ret{{Type: ty}}, nil
}

func parseArg(a string) (Arg, error) {
	ty, rest, err := parseType(a)
	if err != nil {
		return Arg{}, err
	}
	name, def, hasDef := strings.Cut(rest, "=")
	if !IsIdent(name) {
		return Arg{}, fmt.Errorf("argument %q: bad name %q", a, name)
	}
	if hasDef && def == "" {
		return Arg{}, fmt.Errorf("argument %q: empty default", a)
	}
	return Arg{Type: ty, Name: name, Default: def, HasDefault: hasDef}, nil
}

// parseType reads a type from the start of s; rest is what follows it,
// trimmed.
func parseType(s string) (Type, string, error) {
	s = strings.TrimSpace(s)
	var t Type
	k := 0
	for k < len(s) && (isIdentByte(s[k]) || s[k] == '.') {
		k++
	}
	t.Base = s[:k]
	if t.Base == "" {
		return t, "", fmt.Errorf("no type in %q", s)
	}
	if k < len(s) && s[k] == '(' {
		end, err := Matching(s, k)
		if err != nil {
			return t, "", err
		}
		t.Alias = s[k+1 : end]
		k = end + 1
	}
	if k < len(s) && s[k] == '?' {
		t.Optional = true
		k++
	}
	if k < len(s) && s[k] == '[' {
		end := strings.IndexByte(s[k:], ']')
		if end < 0 {
			return t, "", fmt.Errorf("unclosed [ in %q", s)
		}
		t.List, t.Size = true, s[k+1:k+end]
		t.ElemOpt, t.Optional = t.Optional, false
		k += end + 1
		if k < len(s) && s[k] == '?' {
			t.Optional = true
			k++
		}
	}
	if k < len(s) && s[k] != ' ' {
		return t, "", fmt.Errorf("unexpected %q after type %s", s[k:], t)
	}
	return t, strings.TrimSpace(s[k:]), nil
}

// Matching returns the index of the bracket closing the one at s[open].
func Matching(s string, open int) (int, error) {
	depth := 0
	quote := byte(0)
	for k := open; k < len(s); k++ {
		c := s[k]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
			if depth == 0 {
				return k, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced brackets in %q", s[open:])
}

// SplitTop splits s at the commas outside brackets and quotes, trimming
// each part; an empty s gives no parts.
func SplitTop(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var parts []string
	depth, start := 0, 0
	quote := byte(0)
	for k := 0; k < len(s); k++ {
		c := s[k]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:k]))
			start = k + 1
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func IsIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for k := 0; k < len(s); k++ {
		if !isIdentByte(s[k]) {
			return false
		}
	}
	return true
}
