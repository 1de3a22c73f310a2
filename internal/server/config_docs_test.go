package server

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/jobs"
)

// docTable returns the rows (field -> default column) of the table under
// heading in docs/config.md.
func docTable(t *testing.T, heading string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/config.md")
	require.NoError(t, err)
	rows := map[string]string{}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") {
			in = l == heading
			continue
		}
		if !in || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		require.Len(t, cells, 3, "%s: %q", heading, l)
		rows[strings.Trim(strings.TrimSpace(cells[0]), "`")] = strings.TrimSpace(cells[2])
	}
	require.NotEmpty(t, rows, "no table under %q", heading)
	return rows
}

// yamlLeaves returns the YAML path of every leaf field of v with its value.
func yamlLeaves(v reflect.Value, prefix string) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			for p, fv := range yamlLeaves(v.Field(i), prefix+name+".") {
				out[p] = fv
			}
			continue
		}
		out[prefix+name] = v.Field(i)
	}
	return out
}

// TestDocsListEveryJobsAndClusterField: the jobs and cluster tables of
// docs/config.md have a row for every YAML field of jobs.Settings and
// cluster.Config and no other, and a numeric default stated there is what
// WithDefaults sets.
func TestDocsListEveryJobsAndClusterField(t *testing.T) {
	t.Parallel()
	firstValue := regexp.MustCompile("^`([^`]*)`")
	for _, tc := range []struct {
		heading  string
		defaults any
	}{
		{"## `jobs`", jobs.Settings{}.WithDefaults()},
		{"## `cluster`", cluster.Config{}.WithDefaults()},
	} {
		rows := docTable(t, tc.heading)
		fields := yamlLeaves(reflect.ValueOf(tc.defaults), "")
		checked := 0
		for path, v := range fields {
			doc, ok := rows[path]
			require.True(t, ok, "%s: docs/config.md has no row for %s", tc.heading, path)
			switch v.Kind() {
			case reflect.Int, reflect.Int64:
			default:
				continue // text defaults (paths, names, none) are described, not computed
			}
			m := firstValue.FindStringSubmatch(doc)
			require.NotNil(t, m, "%s %s: the default column %q does not start with a value", tc.heading, path, doc)
			if d, ok := v.Interface().(time.Duration); ok {
				got, err := time.ParseDuration(m[1])
				require.NoError(t, err, "%s %s: %q", tc.heading, path, m[1])
				require.Equal(t, d, got, "%s %s: docs say %s, WithDefaults sets %s", tc.heading, path, m[1], d)
			} else {
				require.Equal(t, strconv.FormatInt(v.Int(), 10), m[1], "%s %s", tc.heading, path)
			}
			checked++
		}
		for path := range rows {
			_, ok := fields[path]
			require.True(t, ok, "%s: docs/config.md lists %s, which the config does not have", tc.heading, path)
		}
		require.Positive(t, checked, tc.heading)
	}
}
