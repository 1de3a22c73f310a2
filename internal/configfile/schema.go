package configfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// Docs are the doc comments of struct fields, by type (package path and
// name, "github.com/x/y.Config") then Go field name; the type's own doc
// under "".
type Docs map[string]map[string]string

// durationPattern is Go's duration syntax (time.ParseDuration).
const durationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// envPattern is a value that is an environment reference, expanded before
// the value is read (so "${CONC:-8}" may stand for a number).
const envPattern = `^.*\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}.*$`

// Schema returns the JSON Schema (draft 2020-12) of a YAML document that
// decodes into t: an object per struct (unknown fields refused, each field
// described by its doc comment from docs), durations as Go duration
// strings, enums where enums name them, and a number or boolean also
// allowed as an environment reference (${VAR:-default}).
func Schema(t reflect.Type, docs Docs, enums Enums, id, title string) ([]byte, error) {
	g := schemaGen{docs: docs, enums: enums, defs: map[string]any{}}
	root := g.of(t, "")
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = id
	root["title"] = title
	g.defs["env"] = map[string]any{"type": "string", "pattern": envPattern,
		"description": "an environment reference, ${VAR} or ${VAR:-default}, expanded when the file is read"}
	root["$defs"] = g.defs
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encoding the schema: %w", err)
	}
	return b.Bytes(), nil
}

type schemaGen struct {
	docs  Docs
	enums Enums
	defs  map[string]any
}

func typeKey(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

// defName is a struct's name in $defs: its package's last element and its
// name (upstream.Config).
func defName(t reflect.Type) string { return filepath.Base(t.PkgPath()) + "." + t.Name() }

// of returns the schema of a value of t at generic path.
func (g *schemaGen) of(t reflect.Type, generic string) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	orEnv := func(s map[string]any) map[string]any {
		return map[string]any{"anyOf": []any{s, map[string]any{"$ref": "#/$defs/env"}}}
	}
	switch {
	case t == durationType:
		return map[string]any{"type": "string", "pattern": durationPattern}
	case t.Kind() == reflect.Struct && generic == "":
		return g.object(t, generic)
	case t.Kind() == reflect.Struct:
		name := defName(t)
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = true // placeholder: a struct may contain itself
			g.defs[name] = g.object(t, generic)
		}
		ref := map[string]any{"$ref": "#/$defs/" + name}
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, ref}}
		}
		return ref
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.of(t.Elem(), generic+".*")}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": g.of(t.Elem(), generic+"[]")}
	case isInt(t):
		s := map[string]any{"type": "integer"}
		if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
			s["minimum"] = 0
		}
		return orEnv(s)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return orEnv(map[string]any{"type": "number"})
	case t.Kind() == reflect.Bool:
		return orEnv(map[string]any{"type": "boolean"})
	case t.Kind() == reflect.String:
		vals, ok := g.enums[generic]
		if !ok {
			return map[string]any{"type": "string"}
		}
		enum := make([]any, 0, len(vals))
		for _, v := range vals {
			if n, err := strconv.Atoi(v); err == nil {
				enum = append(enum, n) // a number given as a YAML number
			}
			enum = append(enum, v)
		}
		return orEnv(map[string]any{"enum": enum})
	default:
		return map[string]any{}
	}
}

// object is the schema of struct t at generic path. A struct type is
// described once ($defs), with the enums of the path it is first met at
// (the enumerated fields' structs each have one place in the config).
func (g *schemaGen) object(t reflect.Type, generic string) map[string]any {
	props := map[string]any{}
	for _, f := range StructFields(t) {
		s := g.of(f.Type, joinGeneric(generic, f.Name))
		if d := g.docs[typeKey(f.Owner)][f.GoName]; d != "" {
			s = withDescription(s, d)
		}
		props[f.Name] = s
	}
	out := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	if d := g.docs[typeKey(t)][""]; d != "" {
		out["description"] = d
	}
	return out
}

func withDescription(s map[string]any, d string) map[string]any {
	if _, ref := s["$ref"]; ref {
		return map[string]any{"allOf": []any{s}, "description": d}
	}
	s["description"] = d
	return s
}

// ReadDocs reads the doc comments of every struct type reachable from t
// from the Go source under moduleRoot (the directory of module
// modulePath's go.mod).
func ReadDocs(t reflect.Type, moduleRoot, modulePath string) (Docs, error) {
	docs := Docs{}
	parsed := map[string]map[string]*ast.TypeSpec{}
	var visit func(t reflect.Type) error
	visit = func(t reflect.Type) error {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == durationType || docs[typeKey(t)] != nil {
			return nil
		}
		docs[typeKey(t)] = map[string]string{}
		if rel, ok := strings.CutPrefix(t.PkgPath(), modulePath); ok {
			specs, ok := parsed[t.PkgPath()]
			if !ok {
				var err error
				if specs, err = typeSpecs(filepath.Join(moduleRoot, filepath.FromSlash(rel))); err != nil {
					return err
				}
				parsed[t.PkgPath()] = specs
			}
			if ts := specs[t.Name()]; ts != nil {
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						for _, n := range f.Names {
							docs[typeKey(t)][n.Name] = oneLine(f.Doc.Text())
						}
					}
				}
				docs[typeKey(t)][""] = oneLine(ts.Doc.Text())
			}
		}
		for i := range t.NumField() {
			if err := visit(t.Field(i).Type); err != nil {
				return err
			}
		}
		return nil
	}
	return docs, visit(t)
}

// typeSpecs parses the non-test Go files of dir and returns its type
// declarations by name, each with its doc comment.
func typeSpecs(dir string) (map[string]*ast.TypeSpec, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the source of the config types: %w", err)
	}
	out := map[string]*ast.TypeSpec{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", e.Name(), err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Doc == nil && len(gd.Specs) == 1 {
					ts.Doc = gd.Doc
				}
				out[ts.Name.Name] = ts
			}
		}
	}
	return out, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
