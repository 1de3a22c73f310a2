package sluice

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/upstream"
)

// gatewayOnly are the engine's fields the library does not mirror: a
// fallback names another upstream of the gateway's config, and a Transport
// has one upstream.
var gatewayOnly = map[string]bool{"Upstream.Fallbacks": true, "Upstream.FallbackClasses": true}

// TestUpstreamMirrorsConfig: the public Upstream and the engine's
// upstream.Config have the same fields, in the same order, with the same
// kinds and YAML names, all the way down, so a field added to one and not
// the other fails here.
func TestUpstreamMirrorsConfig(t *testing.T) {
	t.Parallel()
	var walk func(path string, pub, in reflect.Type)
	walk = func(path string, pub, in reflect.Type) {
		require.Equal(t, in.Kind(), pub.Kind(), "%s: kind", path)
		switch pub.Kind() {
		case reflect.Slice:
			walk(path+"[]", pub.Elem(), in.Elem())
			return
		case reflect.Map:
			walk(path+"{}", pub.Elem(), in.Elem())
			return
		case reflect.Struct:
		default:
			return
		}
		var inFields []reflect.StructField
		for i := range in.NumField() {
			if f := in.Field(i); !gatewayOnly[path+"."+f.Name] {
				inFields = append(inFields, f)
			}
		}
		require.Len(t, inFields, pub.NumField(), "%s: number of fields (%v vs %v)", path, pub, in)
		for i := range pub.NumField() {
			pf, inf := pub.Field(i), inFields[i]
			p := path + "." + pf.Name
			require.Equal(t, inf.Name, pf.Name, "%s: field %d", path, i)
			require.Equal(t, inf.Tag.Get("yaml"), pf.Tag.Get("yaml"), "%s: yaml tag", p)
			require.NotEmpty(t, pf.Tag.Get("yaml"), "%s: yaml tag", p)
			walk(p, pf.Type, inf.Type)
		}
	}
	walk("Upstream", reflect.TypeFor[Upstream](), reflect.TypeFor[upstream.Config]())
}

// TestUpstreamConversionCopiesEveryField: every field set in an Upstream
// arrives, with its value, in the engine's config.
func TestUpstreamConversionCopiesEveryField(t *testing.T) {
	t.Parallel()
	var u Upstream
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		case reflect.String:
			v.SetString("s" + string(rune('a'+n%26)))
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(n))
		case reflect.Float64:
			v.SetFloat(float64(n) + 0.5)
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fill(v.Index(0))
		case reflect.Map:
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e)
			v.Set(reflect.MakeMap(v.Type()))
			v.SetMapIndex(reflect.ValueOf("org"), e)
		default:
			t.Fatalf("no filler for kind %s", v.Kind())
		}
	}
	fill(reflect.ValueOf(&u).Elem())
	var compare func(path string, pub, in reflect.Value)
	compare = func(path string, pub, in reflect.Value) {
		switch pub.Kind() {
		case reflect.Struct:
			for i := range pub.NumField() {
				name := pub.Type().Field(i).Name
				compare(path+"."+name, pub.Field(i), in.FieldByName(name))
			}
			return
		case reflect.Slice:
			require.Equal(t, pub.Len(), in.Len(), "%s: length", path)
			for i := range pub.Len() {
				compare(fmt.Sprintf("%s[%d]", path, i), pub.Index(i), in.Index(i))
			}
			return
		case reflect.Map:
			require.Equal(t, pub.Len(), in.Len(), "%s: length", path)
			for _, k := range pub.MapKeys() {
				compare(path+"{"+k.String()+"}", pub.MapIndex(k), in.MapIndex(k))
			}
			return
		default: // a scalar: compared below
		}
		require.False(t, in.IsZero(), "%s was not copied", path)
		require.Equal(t, pub.Convert(in.Type()).Interface(), in.Interface(), "%s", path)
	}
	compare("Upstream", reflect.ValueOf(u), reflect.ValueOf(u.config()))
}

// TestUpstreamDocsStateTheDefaults: every numeric "Defaults to X" in the
// doc comments of Upstream and its parts states what the engine's
// WithDefaults sets (for a class, the four classes' values in order).
func TestUpstreamDocsStateTheDefaults(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "upstream.go", nil, parser.ParseComments)
	require.NoError(t, err)
	docs := map[string]map[string]string{} // type -> field -> doc
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		docs[ts.Name.Name] = map[string]string{}
		for _, fl := range st.Fields.List {
			docs[ts.Name.Name][fl.Names[0].Name] = strings.Join(strings.Fields(fl.Doc.Text()), " ")
		}
		return false
	})
	def := regexp.MustCompile(strings.ReplaceAll(`Defaults to (?:the profile's, else )?(N(?:, N)*)`, "N", `[0-9](?:[0-9a-z.]*[0-9a-z])?`))
	d := Upstream{Name: "a", Protocol: Anthropic}.config().WithDefaults()
	classes := reflect.ValueOf(d.Classes)
	checked := 0
	var walk func(typ string, v reflect.Value)
	walk = func(typ string, v reflect.Value) {
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			fv := v.Field(i)
			if typ == "Upstream" && (name == "Classes") {
				continue // per class, below
			}
			if fv.Kind() == reflect.Struct {
				walk(v.Type().Field(i).Type.Name(), fv)
				continue
			}
			m := def.FindStringSubmatch(docs[typ][name])
			if m == nil {
				continue
			}
			checked++
			require.Equal(t, docString(fv), m[1], "%s.%s: %q", typ, name, docs[typ][name])
		}
	}
	walk("Upstream", reflect.ValueOf(d))
	for _, field := range []string{"Weight", "MaxWait", "Headroom"} {
		m := def.FindStringSubmatch(docs["Class"][field])
		require.NotNil(t, m, "Class.%s states its defaults", field)
		var vals []string
		for c := range classes.NumField() {
			vals = append(vals, docString(classes.Field(c).FieldByName(field)))
		}
		require.Equal(t, strings.Join(vals, ", "), m[1], "Class.%s", field)
		checked++
	}
	require.Greater(t, checked, 20)
}

// docString formats a default as the doc comments write it: 500ms, 30s,
// 10m, 0.98, 64.
func docString(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		s := d.String() // 10m0s, 1h0m0s
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	return fmt.Sprint(v.Interface())
}
