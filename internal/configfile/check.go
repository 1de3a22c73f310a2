package configfile

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Enums are the values a string field may take, by generic path: a list's
// items are "[]", a map's values ".*" (e.g. "upstreams[].protocol",
// "upstreams[].fallback_classes[]"). An empty value (the default) is always
// allowed. Check and Schema both read it.
type Enums map[string][]string

// Check reports the first value in root (a parsed YAML document) that a
// value of type t cannot take, in document order, as an *Error with its
// line and YAML path: an unknown field (with the nearest known name, or
// the enclosing field it belongs to when it was indented too far), a
// value of the wrong kind, a duration without a unit, a value outside
// enums. Null values are left to the decoder (they leave the zero value).
// A struct type with its own UnmarshalYAML may also be written as a
// string (upstream.Key: a key, or {key, limits, org}).
func Check(root *yaml.Node, t reflect.Type, enums Enums) error {
	n := deref(root)
	if n == nil || n.Kind == 0 {
		return &Error{Msg: "the file is empty"}
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			return &Error{Msg: "the file is empty"}
		}
		n = deref(n.Content[0])
	}
	c := checker{enums: enums}
	return c.value(n, t, "", "", nil)
}

type checker struct {
	enums Enums
	depth int
}

// scope is an enclosing struct's known field names, for "indented too
// far" hints.
type scope struct {
	path   string
	fields []string
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// value checks n against t. path is n's YAML path, generic its path with
// indices dropped (for enums), outer the enclosing structs' fields.
func (c *checker) value(n *yaml.Node, t reflect.Type, path, generic string, outer []scope) error {
	n = deref(n)
	if n == nil || isNull(n) {
		return nil
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 64 {
		return &Error{Line: n.Line, Path: path, Msg: "nested too deeply"}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func(want string) error {
		return &Error{Line: n.Line, Path: path, Msg: fmt.Sprintf("want %s, got %s", want, describe(n))}
	}
	switch {
	case t == durationType:
		return c.duration(n, path)
	case t.Kind() == reflect.Struct && reflect.PointerTo(t).Implements(unmarshalerType):
		if n.Kind == yaml.ScalarNode {
			return c.scalar(n, reflect.TypeFor[string](), path, generic)
		}
		if n.Kind != yaml.MappingNode {
			return wrong("a string or a mapping")
		}
		return c.fields(n, t, path, generic, outer)
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return wrong("a mapping (field: value)")
		}
		return c.fields(n, t, path, generic, outer)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return wrong("a mapping (name: value)")
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := deref(n.Content[i])
			if err := once(seen, k, join(path, k.Value)); err != nil {
				return err
			}
			if err := c.value(n.Content[i+1], t.Elem(), join(path, k.Value), generic+".*", nil); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return wrong("a list (- item, or [a, b])")
		}
		for i, item := range n.Content {
			if err := c.value(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), generic+"[]", nil); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return wrong(kindWord(t))
	}
	return c.scalar(n, t, path, generic)
}

// fields checks a mapping against struct t's YAML fields.
func (c *checker) fields(n *yaml.Node, t reflect.Type, path, generic string, outer []scope) error {
	fields := StructFields(t)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	inner := append(slices.Clip(outer), scope{path: path, fields: names})
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		p := join(path, k.Value)
		if err := once(seen, k, p); err != nil {
			return err
		}
		j := slices.Index(names, k.Value)
		if j < 0 {
			return &Error{Line: k.Line, Path: p, Msg: unknownField(k.Value, names, outer)}
		}
		if err := c.value(n.Content[i+1], fields[j].Type, p, joinGeneric(generic, k.Value), inner); err != nil {
			return err
		}
	}
	return nil
}

// once reports a key given twice in one mapping (the second would
// silently win).
func once(seen map[string]int, k *yaml.Node, path string) error {
	if first, dup := seen[k.Value]; dup {
		return &Error{Line: k.Line, Path: path, Msg: fmt.Sprintf("given twice (first at line %d)", first)}
	}
	seen[k.Value] = k.Line
	return nil
}

// unknownField says what an unknown key probably is: a near miss of a
// known one, or a field of an enclosing struct indented too far.
func unknownField(key string, known []string, outer []scope) string {
	if s := Suggest(key, known); s != "" {
		return "unknown field; did you mean " + s + "?"
	}
	for i := len(outer) - 1; i >= 0; i-- {
		if slices.Contains(outer[i].fields, key) {
			where := outer[i].path
			if where == "" {
				where = "the top level"
			}
			return fmt.Sprintf("unknown field here; %s is a field of %s: check its indentation", key, where)
		}
	}
	if len(known) <= 12 {
		return "unknown field; the fields here are " + strings.Join(known, ", ")
	}
	return "unknown field (docs/config.md lists the fields)"
}

// scalar checks a scalar by decoding it as the decoder will.
func (c *checker) scalar(n *yaml.Node, t reflect.Type, path, generic string) error {
	if t.Kind() == reflect.Interface {
		return nil
	}
	v := reflect.New(t)
	err := n.Decode(v.Interface())
	if err == nil && isInt(t) && n.ShortTag() != "!!int" {
		// The decoder truncates 1.5 to 1: refuse what it would change.
		err = errors.New("not a whole number")
	}
	if err != nil {
		msg := fmt.Sprintf("want %s, got %s", kindWord(t), describe(n))
		if isInt(t) && n.ShortTag() == "!!int" {
			msg = fmt.Sprintf("%s is out of range for this field", n.Value)
		}
		if reflect.PointerTo(t).Implements(textUnmarshalerType) {
			msg = fmt.Sprintf("%s: %v", describe(n), err)
		}
		return &Error{Line: n.Line, Path: path, Msg: msg, Err: err}
	}
	// Compared as the fields' parsers compare (case and spaces aside), so
	// the check is never stricter than validation.
	if vals, ok := c.enums[generic]; ok && t.Kind() == reflect.String && n.Value != "" &&
		!slices.Contains(vals, strings.ToLower(strings.TrimSpace(n.Value))) {
		msg := fmt.Sprintf("%q is not one of %s", n.Value, strings.Join(vals, ", "))
		if s := Suggest(n.Value, vals); s != "" {
			msg += "; did you mean " + s + "?"
		}
		return &Error{Line: n.Line, Path: path, Msg: msg}
	}
	return nil
}

var bareNumberRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

var daysRE = regexp.MustCompile(`^([0-9]+)d$`)

// duration checks a duration: Go's syntax (300ms, 1.5s, 2m, 1h30m).
func (c *checker) duration(n *yaml.Node, path string) error {
	if n.Kind != yaml.ScalarNode {
		return &Error{Line: n.Line, Path: path, Msg: "want a duration such as 30s, got " + describe(n)}
	}
	v := strings.TrimSpace(n.Value)
	if _, err := time.ParseDuration(v); err == nil && n.ShortTag() == "!!str" {
		return nil // the decoder reads a duration from text only (0 too)
	}
	msg := fmt.Sprintf("want a duration such as 500ms, 30s, 5m or 1h, got %s", describe(n))
	switch {
	case bareNumberRE.MatchString(v):
		msg = fmt.Sprintf("got %s: durations need a unit: %ss", v, v)
	case daysRE.MatchString(v):
		days, _ := strconv.Atoi(daysRE.FindStringSubmatch(v)[1])
		msg = fmt.Sprintf("got %q: durations have no day unit: %dh", v, days*24)
	}
	return &Error{Line: n.Line, Path: path, Msg: msg}
}

// Field is one YAML field of a struct (inline structs flattened).
type Field struct {
	Name   string
	Type   reflect.Type
	GoName string
	// Owner is the struct type that declares the field (for its doc).
	Owner reflect.Type
}

// StructFields lists t's YAML fields in declaration order, fields of
// ",inline" structs in their place; "-" and unexported fields left out.
func StructFields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			out = append(out, StructFields(f.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, Field{Name: name, Type: f.Type, GoName: f.Name, Owner: t})
	}
	return out
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	default:
		return false
	}
}

// kindWord names what a value of t is written as, in YAML's words.
func kindWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 30s"
	case isInt(t):
		return "a whole number"
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	default:
		return "a value"
	}
}

// describe names what n is, in YAML's words, quoting a short scalar.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len([]rune(v)) > 40 {
			v = string([]rune(v)[:37]) + "..."
		}
		switch n.ShortTag() {
		case "!!int", "!!float":
			return "the number " + v
		case "!!bool":
			return v
		}
		return strconv.Quote(v)
	default:
		return "a value"
	}
}

// join appends a map key or field to a YAML path; a key that is not a
// plain word is quoted in brackets.
func join(path, key string) string {
	if !plainKeyRE.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func joinGeneric(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]*$`)
