package sluice

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/upstream"
)

// TestUpstreamMirrorsConfig: the public Upstream and the engine's
// upstream.Config have the same fields, in the same order, with the same
// kinds and YAML names, all the way down, so a field added to one and not
// the other fails here.
func TestUpstreamMirrorsConfig(t *testing.T) {
	t.Parallel()
	var walk func(path string, pub, in reflect.Type)
	walk = func(path string, pub, in reflect.Type) {
		require.Equal(t, in.Kind(), pub.Kind(), "%s: kind", path)
		if pub.Kind() != reflect.Struct {
			return
		}
		require.Equal(t, in.NumField(), pub.NumField(), "%s: number of fields (%v vs %v)", path, pub, in)
		for i := range pub.NumField() {
			pf, inf := pub.Field(i), in.Field(i)
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
		default:
			t.Fatalf("no filler for kind %s", v.Kind())
		}
	}
	fill(reflect.ValueOf(&u).Elem())
	var compare func(path string, pub, in reflect.Value)
	compare = func(path string, pub, in reflect.Value) {
		if pub.Kind() == reflect.Struct {
			for i := range pub.NumField() {
				compare(path+"."+pub.Type().Field(i).Name, pub.Field(i), in.Field(i))
			}
			return
		}
		require.False(t, in.IsZero(), "%s was not copied", path)
		require.Equal(t, pub.Convert(in.Type()).Interface(), in.Interface(), "%s", path)
	}
	compare("Upstream", reflect.ValueOf(u), reflect.ValueOf(u.config()))
}
