package recipes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// A --config file maps settings to values: JSON, or YAML when its name
// ends in .yaml or .yml. Settings may be grouped in sections (the Mamba
// seed's "model", "vram", "training"; the TTS seed's config.yaml): a
// nested mapping's keys are read as section.key. A key is a flag's name or
// alias (batch-size, batch_size, gradient_accumulation_steps), a key the
// recipe maps to a flag (training.learning_rate), or a section's key whose
// last part is a flag's name or alias. Numbers are read exactly: an
// integer flag takes an integer in any notation the format allows
// (1000000, 1e6, 1000000.0; in YAML also 0x10, 0o17, 1_000), and rejects a
// fraction or a value out of range; a float flag rejects NaN and
// infinities. Unknown keys and settings given twice are errors naming the
// key.

// valueKind is the kind of a config value.
type valueKind int

const (
	vString valueKind = iota
	vNumber
	vBool
	vNull
	vComposite // a list or a mapping
)

// configValue is one setting of a --config file.
type configValue struct {
	kind valueKind
	text string   // as written (a string: its content)
	num  *big.Rat // vNumber: the exact value; nil when NaN or ±Inf
	b    bool
}

// configEntry is a key and its value, in file order. A nested mapping is a
// section: its entries, keyed section.key, and the whole mapping as text
// (JSON or YAML flow style) for a flag the recipe maps the section's key
// to (ganvit's unfreezing_schedule: {8: [11]}).
type configEntry struct {
	key     string
	val     configValue
	section []configEntry
}

// readConfigFile reads path as JSON or, by its extension, YAML.
func readConfigFile(path string) ([]configEntry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return readYAMLConfig(raw)
	}
	return readJSONConfig(raw)
}

func readJSONConfig(raw []byte) ([]configEntry, error) {
	bad := func(err error) ([]configEntry, error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		var se *json.SyntaxError
		if errors.As(err, &se) && hasComment(raw) {
			// The seeds' snippets carry // comments, which JSON has not.
			return nil, fmt.Errorf("not valid JSON: %v (JSON has no comments: remove them, or write the settings as YAML, whose comments start with #)", err)
		}
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // integers stay exact: 1000000 is not 1e+06
	tok, err := dec.Token()
	if err != nil {
		return bad(err)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not valid JSON: want an object of settings, not %v", tok)
	}
	var out []configEntry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return bad(err)
		}
		if obj, ok := v.(map[string]any); ok { // a section: its keys as key.sub
			e, err := jsonSectionEntry(key, obj)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			continue
		}
		cv, err := jsonValue(key, v)
		if err != nil {
			return nil, err
		}
		out = append(out, configEntry{key: key, val: cv})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return bad(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not valid JSON: data after the object")
	}
	return out, nil
}

// at is raw[i], or 0 outside it.
// hasComment reports whether raw has a // or /* outside its strings:
// anywhere in the file, a syntax error's offset being relative to the
// value the decoder was reading (a section's, for a comment inside one).
func hasComment(raw []byte) bool {
	in, esc := false, false
	for i, c := range raw {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && c == '/' && i+1 < len(raw) && (raw[i+1] == '/' || raw[i+1] == '*'):
			return true
		}
	}
	return false
}

// jsonSection flattens a section (decoded with UseNumber), keys sorted.
func jsonSection(prefix string, obj map[string]any) ([]configEntry, error) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []configEntry
	for _, k := range keys {
		key := prefix + "." + k
		if sub, ok := obj[k].(map[string]any); ok {
			e, err := jsonSectionEntry(key, sub)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			continue
		}
		cv, err := jsonValue(key, obj[k])
		if err != nil {
			return nil, err
		}
		out = append(out, configEntry{key: key, val: cv})
	}
	return out, nil
}

// jsonSectionEntry is the section key: its entries and its text.
func jsonSectionEntry(key string, obj map[string]any) (configEntry, error) {
	sub, err := jsonSection(key, obj)
	if err != nil {
		return configEntry{}, err
	}
	text, err := json.Marshal(obj)
	if err != nil {
		return configEntry{}, fmt.Errorf("%s: %v", key, err)
	}
	return configEntry{key: key, val: configValue{kind: vComposite, text: string(text)}, section: sub}, nil
}

func jsonValue(key string, v any) (configValue, error) {
	cv := configValue{}
	switch v := v.(type) {
	case string:
		cv.kind, cv.text = vString, v
	case json.Number:
		cv.kind, cv.text = vNumber, v.String()
		if cv.num, _ = new(big.Rat).SetString(v.String()); cv.num == nil {
			return cv, fmt.Errorf("%s: bad number %s", key, v)
		}
	case bool:
		cv.kind, cv.b, cv.text = vBool, v, strconv.FormatBool(v)
	case nil:
		cv.kind = vNull
	default:
		cv.kind = vComposite
	}
	return cv, nil
}

func readYAMLConfig(raw []byte) ([]configEntry, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %v", err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not valid YAML: want a mapping of settings (line %d)", root.Line)
	}
	return yamlMapping("", root)
}

// yamlMapping reads a mapping's settings; a nested mapping is a section
// whose keys become section.key.
func yamlMapping(prefix string, node *yaml.Node) ([]configEntry, error) {
	var out []configEntry
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if v.Kind == yaml.MappingNode {
			sub, err := yamlMapping(key, v)
			if err != nil {
				return nil, err
			}
			flow := *v
			flow.Style = yaml.FlowStyle
			text, err := yaml.Marshal(&flow)
			if err != nil {
				return nil, fmt.Errorf("%s (line %d): %v", key, v.Line, err)
			}
			out = append(out, configEntry{key: key, val: configValue{kind: vComposite, text: strings.TrimSpace(string(text))}, section: sub})
			continue
		}
		k = &yaml.Node{Value: key}
		cv := configValue{kind: vString, text: v.Value}
		if v.Kind != yaml.ScalarNode {
			cv.kind = vComposite
			out = append(out, configEntry{key: k.Value, val: cv})
			continue
		}
		switch v.ShortTag() {
		case "!!null":
			cv.kind = vNull
		case "!!bool":
			cv.kind = vBool
			if err := v.Decode(&cv.b); err != nil {
				return nil, fmt.Errorf("%s (line %d): %v", k.Value, v.Line, err)
			}
		case "!!int", "!!float":
			cv.kind = vNumber
			var f float64
			if v.ShortTag() == "!!int" {
				var n any
				if err := v.Decode(&n); err != nil {
					return nil, fmt.Errorf("%s (line %d): %v", k.Value, v.Line, err)
				}
				switch n := n.(type) {
				case int:
					cv.num = new(big.Rat).SetInt64(int64(n))
				case int64:
					cv.num = new(big.Rat).SetInt64(n)
				case uint64:
					cv.num = new(big.Rat).SetInt(new(big.Int).SetUint64(n))
				default:
					return nil, fmt.Errorf("%s (line %d): bad integer %s", k.Value, v.Line, v.Value)
				}
				break
			}
			if err := v.Decode(&f); err != nil {
				return nil, fmt.Errorf("%s (line %d): %v", k.Value, v.Line, err)
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				break // num stays nil
			}
			if cv.num, _ = new(big.Rat).SetString(strings.ReplaceAll(v.Value, "_", "")); cv.num == nil {
				cv.num = new(big.Rat).SetFloat64(f)
			}
		}
		out = append(out, configEntry{key: k.Value, val: cv})
	}
	return out, nil
}

// flagText turns a config value into the text the flag f parses, or says
// why the value does not fit the flag.
func flagText(f cli.Flag, v configValue) (string, error) {
	switch v.kind {
	case vNull:
		return "", fmt.Errorf("has no value")
	case vComposite:
		return "", fmt.Errorf("must be a single value, not a list or a mapping")
	}
	switch f.(type) {
	case *cli.IntFlag:
		return intText(v, big.NewInt(math.MinInt), big.NewInt(math.MaxInt))
	case *cli.Int64Flag:
		return intText(v, big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64))
	case *cli.Uint64Flag:
		return intText(v, big.NewInt(0), new(big.Int).SetUint64(math.MaxUint64))
	case *cli.Float64Flag:
		return floatText(v)
	case *cli.BoolFlag:
		switch v.kind {
		case vBool:
			return strconv.FormatBool(v.b), nil
		case vString:
			switch strings.ToLower(strings.TrimSpace(v.text)) {
			case "true", "yes", "on", "1":
				return "true", nil
			case "false", "no", "off", "0":
				return "false", nil
			}
		}
		return "", fmt.Errorf("must be true or false, not %s", v.text)
	case *cli.GenericFlag:
		if v.kind == vBool {
			return strconv.FormatBool(v.b), nil
		}
		return v.text, nil
	case *cli.StringFlag:
		if v.kind == vBool {
			return strconv.FormatBool(v.b), nil
		}
		return v.text, nil // a number as written: memory-limit 0.9
	}
	return "", fmt.Errorf("cannot be set from a config file")
}

// number reads v as a number: a number, or a string holding one.
func number(v configValue) (num *big.Rat, finite bool, err error) {
	switch v.kind {
	case vNumber:
		return v.num, v.num != nil, nil
	case vString:
		s := strings.TrimSpace(v.text)
		if n, ok := new(big.Int).SetString(s, 0); ok { // 0x10, 1_000
			return new(big.Rat).SetInt(n), true, nil
		}
		if r, ok := new(big.Rat).SetString(s); ok {
			return r, true, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return nil, false, nil
		}
	}
	return nil, false, fmt.Errorf("must be a number, not %q", v.text)
}

func intText(v configValue, lo, hi *big.Int) (string, error) {
	num, finite, err := number(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("must be an integer, not %q", v.text)
	case !finite || !num.IsInt():
		return "", fmt.Errorf("must be an integer, not %s", v.text)
	}
	n := num.Num()
	switch {
	case n.Cmp(lo) < 0 && lo.Sign() == 0:
		return "", fmt.Errorf("must not be negative, not %s", v.text)
	case n.Cmp(lo) < 0:
		return "", fmt.Errorf("%s is out of range (less than %d)", v.text, lo)
	case n.Cmp(hi) > 0:
		return "", fmt.Errorf("%s is out of range (more than %d)", v.text, hi)
	}
	return n.String(), nil
}

func floatText(v configValue) (string, error) {
	num, finite, err := number(v)
	if err != nil {
		return "", err
	}
	if !finite {
		return "", fmt.Errorf("must be a finite number, not %s", v.text)
	}
	f, _ := num.Float64()
	if math.IsInf(f, 0) {
		return "", fmt.Errorf("%s is out of range", v.text)
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// ApplyConfig sets the flags of c's command not given on the command line
// from the --config file (see the format above); keys maps the recipe's
// own config keys (section.key, as written in its seed) to flag names. It
// returns the flags the file set, with the file's path.
func ApplyConfig(c *cli.Context, keys map[string]string) (map[string]string, error) {
	path := c.String("config")
	if path == "" {
		return nil, nil
	}
	entries, err := readConfigFile(path)
	if err != nil {
		return nil, Usagef("--config %s: %v", path, err)
	}
	flags := map[string]cli.Flag{} // every name and alias
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			flags[n] = f
		}
	}
	find := func(key string) (cli.Flag, bool) {
		if name, ok := keys[key]; ok {
			f, ok := flags[name]
			return f, ok
		}
		for _, k := range []string{key, strings.ReplaceAll(key, "_", "-")} {
			if f, ok := flags[k]; ok {
				return f, true
			}
		}
		if i := strings.LastIndexByte(key, '.'); i >= 0 {
			last := key[i+1:]
			for _, k := range []string{last, strings.ReplaceAll(last, "_", "-")} {
				if f, ok := flags[k]; ok {
					return f, true
				}
			}
		}
		return nil, false
	}
	// A section is its entries, unless the recipe maps its key to a
	// string flag, which then takes the whole mapping as text.
	var expand func([]configEntry) []configEntry
	expand = func(es []configEntry) []configEntry {
		var out []configEntry
		for _, e := range es {
			if e.section == nil {
				out = append(out, e)
				continue
			}
			if _, ok := flags[keys[e.key]].(*cli.StringFlag); ok {
				out = append(out, configEntry{key: e.key, val: configValue{kind: vString, text: e.val.text}})
				continue
			}
			out = append(out, expand(e.section)...)
		}
		return out
	}
	entries = expand(entries)
	set := map[string]string{}
	seen := map[string]string{}
	for _, e := range entries {
		f, ok := find(e.key)
		if !ok || f.Names()[0] == "config" {
			return nil, Usagef("--config %s: unknown setting %q", path, e.key)
		}
		name := f.Names()[0]
		if k, dup := seen[name]; dup {
			if k == e.key {
				return nil, Usagef("--config %s: %q is set twice", path, k)
			}
			return nil, Usagef("--config %s: %q and %q set the same flag --%s", path, k, e.key, name)
		}
		seen[name] = e.key
		text, err := flagText(f, e.val)
		if err != nil {
			return nil, Usagef("--config %s: %s: %v", path, e.key, err)
		}
		if isSet(c, f) {
			continue
		}
		if err := c.Set(name, text); err != nil {
			return nil, Usagef("--config %s: %s: %v", path, e.key, err)
		}
		set[name] = path
	}
	return set, nil
}

// isSet reports whether the command line set f under any of its names.
func isSet(c *cli.Context, f cli.Flag) bool {
	for _, n := range f.Names() {
		if c.IsSet(n) {
			return true
		}
	}
	return false
}
