// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decode fills out (a pointer to a Config holding the defaults) from the
// YAML document in data, key by key, and returns every problem it meets
// rather than the first: a bad value, an unknown or repeated key, a node of
// the wrong kind. A key that fails keeps its default, so validation can
// still look at the rest. It also returns the line of every field it saw.
//
// The walk is by hand because yaml.v3's own (a Decoder with KnownFields)
// does not reach that far: a type that decodes itself and fails (a
// duration, the TLS or proxy settings) ends its decoding with that one
// error and no line, hiding every other problem; and it checks a
// mapping's keys for repeats pair by pair, quadratic in the size of the
// file (20,000 keys under api: 2.2 s against 0.1 s here). The leaves are
// yaml.v3's.
func decode(data []byte, out any) (lineIndex, Problems) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{syntaxProblem(err)}
	}
	d := &decoder{lines: lineIndex{}}
	if len(doc.Content) == 0 {
		return d.lines, nil // an empty file: every default
	}
	d.value(doc.Content[0], "", reflect.ValueOf(out).Elem())
	return d.lines, d.problems
}

type decoder struct {
	lines    lineIndex
	problems Problems
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path == "" {
		path = "the file"
	}
	msg = path + ": " + msg
	d.problems = append(d.problems, Problem{Line: n.Line, Msg: msg})
}

var (
	obsoleteUnmarshaler = reflect.TypeFor[interface {
		UnmarshalYAML(func(any) error) error
	}]()
	unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
)

// value decodes n into v, which is at path in the file.
func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "refresh:" with nothing under it: the defaults stay
	}
	t := v.Type()
	custom := reflect.PointerTo(t).Implements(obsoleteUnmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		// Walked here even when the type has its own unmarshaler (the TLS
		// settings): that is what reports each bad key, not only the first.
		d.mapping(n, path, v)
	case t.Kind() == reflect.Struct && !custom:
		d.fail(n, path, "must be a mapping of keys, not %s", kindName(n))
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode && !custom:
		d.sequence(n, path, v)
	case t.Kind() == reflect.Pointer && !custom:
		p := reflect.New(t.Elem())
		before := len(d.problems)
		d.value(n, path, p.Elem())
		if len(d.problems) == before {
			v.Set(p)
		}
	default:
		d.leaf(n, path, v)
	}
}

// sequence decodes the items of n into the slice v.
func (d *decoder) sequence(n *yaml.Node, path string, v reflect.Value) {
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		d.lines[itemPath] = item.Line
		d.value(item, itemPath, s.Index(i))
	}
	v.Set(s)
}

// leaf decodes a leaf (or a type that decodes itself): yaml and the
// type's own unmarshaler judge it. Decoding into a fresh value keeps the
// default whole when it fails.
func (d *decoder) leaf(n *yaml.Node, path string, v reflect.Value) {
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil {
		d.fail(n, path, "%s", leafMessage(err))
		return
	}
	v.Set(p.Elem())
}

// mapping decodes the keys of n into the fields of the struct v.
func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	fields := yamlFields(v.Type())
	// Merged mappings (<<: *defaults) first, so the keys written here win.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, val := n.Content[i], n.Content[i+1]; k.Tag == "!!merge" {
			d.merge(val, path, v)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" {
			continue
		}
		key := k.Value
		keyPath := key
		if path != "" {
			keyPath = path + "." + key
		}
		if first, dup := seen[key]; dup {
			d.fail(k, path, "duplicate key %q (first at line %d)", echo(key), first)
			continue
		}
		seen[key] = k.Line
		index, known := fields[key]
		if !known {
			d.fail(k, path, "unknown key %q", echo(key))
			continue
		}
		d.lines[keyPath] = k.Line
		d.value(val, keyPath, v.FieldByIndex(index))
	}
}

// merge decodes the mapping, or list of mappings, of a merge key into v.
func (d *decoder) merge(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.SequenceNode {
		for _, item := range n.Content {
			d.merge(item, path, v)
		}
		return
	}
	d.value(n, path, v)
}

// yamlFields maps each key a struct accepts to its field, inline structs
// (the proxy settings under api) included.
func yamlFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for key, index := range yamlFields(f.Type) {
				out[key] = append([]int{i}, index...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", echo(n.Value))
	}
	return "this"
}

// yaml's messages name Go types and repeat the line, which the problem
// already has; say it in the file's terms instead.
var (
	yamlLinePrefix  = regexp.MustCompile(`^line \d+: `)
	yamlGoTypeNames = regexp.MustCompile(` into (?:\[\])?\*?(?:config|model|v\d+)\.(\w+)$`)
)

func leafMessage(err error) string {
	var typeErr *yaml.TypeError
	if !errors.As(err, &typeErr) {
		return err.Error()
	}
	msgs := make([]string, len(typeErr.Errors))
	for i, msg := range typeErr.Errors {
		msg = yamlLinePrefix.ReplaceAllString(msg, "")
		msgs[i] = yamlGoTypeNames.ReplaceAllString(msg, " into $1")
	}
	return strings.Join(msgs, "; ")
}

// yamlSyntaxLine is how yaml starts a syntax error that has a line.
var yamlSyntaxLine = regexp.MustCompile(`^yaml: line (\d+): `)

func syntaxProblem(err error) Problem {
	msg := err.Error()
	if m := yamlSyntaxLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Line: line, Msg: "not valid YAML: " + msg[len(m[0]):]}
	}
	return Problem{Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}
