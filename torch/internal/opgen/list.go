package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/token"
	"strconv"
	"strings"
)

// Entry is one wrapper of the list.
type Entry struct {
	Line   int
	Doc    []string // the doc comment's lines, without "//"
	Recv   string   // receiver name; "" for a function
	Name   string   // Go name
	Params []Param  // as written, constants included
	Schema *Schema
}

// Param is one item of an entry's parameter list: a Go parameter, or a
// constant passed for a schema argument (name=literal).
type Param struct {
	Name     string // Go name; for a constant, the schema argument's name
	Variadic bool   // name...
	AsFloat  bool   // name:float, a Scalar passed as a double
	Const    string // the literal of a constant
	IsConst  bool
}

// ListError is a fault in the list, located by line.
type ListError struct {
	File string
	Line int
	Msg  string
}

func (e *ListError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ParseList reads the list: "#" lines are comments about the list, "//"
// lines are the doc comment of the entry that follows them, and every
// other non-blank line is an entry.
func ParseList(file string, src []byte) ([]*Entry, error) {
	var entries []*Entry
	var doc []string
	docLine := 0
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	fail := func(line int, format string, args ...any) error {
		return &ListError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch {
		case strings.HasPrefix(line, "//"):
			if len(doc) == 0 {
				docLine = n
			}
			doc = append(doc, strings.TrimPrefix(line, "//"))
			continue
		case line == "" || strings.HasPrefix(line, "#"):
			if len(doc) > 0 {
				return nil, fail(docLine, "doc comment not followed by an entry")
			}
			continue
		}
		e, err := parseEntry(line)
		if err != nil {
			return nil, fail(n, "%v", err)
		}
		e.Line, e.Doc = n, doc
		doc = nil
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(doc) > 0 {
		return nil, fail(docLine, "doc comment not followed by an entry")
	}
	return entries, nil
}

// parseEntry reads "recv.Name(params)  ns::op.overload(schema args) -> results".
func parseEntry(line string) (*Entry, error) {
	open := strings.IndexByte(line, '(')
	if open < 0 {
		return nil, fmt.Errorf("entry %q: want Name(params) followed by a schema", line)
	}
	e := &Entry{}
	head := line[:open]
	if recv, name, ok := strings.Cut(head, "."); ok {
		e.Recv, e.Name = recv, name
		if !goIdent(recv) {
			return nil, fmt.Errorf("bad receiver name %q", recv)
		}
	} else {
		e.Name = head
	}
	if !goIdent(e.Name) {
		return nil, fmt.Errorf("bad Go name %q", e.Name)
	}
	end, err := matching(line, open)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{e.Recv: e.Recv != ""}
	for _, p := range splitTop(line[open+1 : end]) {
		par, err := parseParam(p)
		if err != nil {
			return nil, err
		}
		if !par.IsConst {
			if seen[par.Name] {
				return nil, fmt.Errorf("parameter %s named twice", par.Name)
			}
			seen[par.Name] = true
		}
		e.Params = append(e.Params, par)
	}
	text := strings.TrimSpace(line[end+1:])
	if text == "" {
		return nil, fmt.Errorf("%s: no schema after the parameters", e.Name)
	}
	if e.Schema, err = ParseSchema(text); err != nil {
		return nil, err
	}
	return e, nil
}

func parseParam(p string) (Param, error) {
	if name, lit, ok := strings.Cut(p, "="); ok {
		name, lit = strings.TrimSpace(name), strings.TrimSpace(lit)
		if !isIdent(name) {
			return Param{}, fmt.Errorf("constant %q: bad argument name", p)
		}
		if _, err := parseLiteral(lit); err != nil {
			return Param{}, fmt.Errorf("constant %q: %w", p, err)
		}
		return Param{Name: name, Const: lit, IsConst: true}, nil
	}
	var par Param
	if s, ok := strings.CutSuffix(p, "..."); ok {
		par.Variadic, p = true, s
	}
	if s, ok := strings.CutSuffix(p, ":float"); ok {
		par.AsFloat, p = true, s
	}
	if !goIdent(p) {
		return Param{}, fmt.Errorf("bad parameter %q (want name, name..., name:float or argument=literal)", p)
	}
	par.Name = p
	return par, nil
}

// literal is a constant's value: a string, bool, None or number.
type literal struct {
	kind string // str, bool, none, int, float
	text string // Go source for the value
}

func parseLiteral(s string) (literal, error) {
	switch {
	case s == "True" || s == "true":
		return literal{"bool", "true"}, nil
	case s == "False" || s == "false":
		return literal{"bool", "false"}, nil
	case s == "None":
		return literal{"none", ""}, nil
	case strings.HasPrefix(s, `"`):
		v, err := strconv.Unquote(s)
		if err != nil {
			return literal{}, fmt.Errorf("bad string %s", s)
		}
		return literal{"str", strconv.Quote(v)}, nil
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return literal{"int", s}, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return literal{"float", s}, nil
	}
	return literal{}, fmt.Errorf("want a string, True, False, None or a number, got %q", s)
}

// goIdent is a Go identifier that is not a keyword.
func goIdent(s string) bool { return isIdent(s) && !token.IsKeyword(s) }
