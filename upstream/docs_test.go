package upstream_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/upstream"
)

// configDoc returns the lines of docs/config.md.
func configDoc(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/config.md")
	require.NoError(t, err)
	return strings.Split(string(b), "\n")
}

// section returns the table rows (split into trimmed cells) of the section
// whose heading is heading.
func section(t *testing.T, lines []string, heading string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, l := range lines {
		if strings.HasPrefix(l, "#") {
			in = l == heading
			continue
		}
		if !in || !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	require.NotEmpty(t, rows, "no table under %q", heading)
	return rows[1:] // the header
}

// leafPaths returns the YAML paths of every leaf field of t, with the
// four classes folded into classes.<class>.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		p := prefix + f.Tag.Get("yaml")
		if f.Type.Kind() == reflect.Struct {
			out = append(out, leafPaths(f.Type, p+".")...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// matches reports whether doc (a token from the docs) states value v.
func matches(doc string, v any) bool {
	switch v := v.(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		return err == nil && d == v
	case int, int64, float64:
		f, err := strconv.ParseFloat(doc, 64)
		return err == nil && f == reflect.ValueOf(v).Convert(reflect.TypeFor[float64]()).Float()
	default:
		return doc == reflect.ValueOf(v).String()
	}
}

func classValues[T any](c upstream.Classes, f func(upstream.Class) T) []any {
	return []any{f(c.Critical), f(c.High), f(c.Normal), f(c.Low)}
}

// TestDocsListEveryFieldWithItsDefault: the upstreams[i] table of
// docs/config.md has a row for every field, and its default column states
// what WithDefaults sets.
func TestDocsListEveryFieldWithItsDefault(t *testing.T) {
	t.Parallel()
	d := upstream.Config{Name: "a", Protocol: upstream.Anthropic}.WithDefaults()
	want := map[string][]any{
		"profile":                         {string(d.Profile)},
		"limits.requests_per_minute":      {d.Limits.RequestsPerMinute},
		"limits.input_tokens_per_minute":  {d.Limits.InputTokensPerMinute},
		"limits.output_tokens_per_minute": {d.Limits.OutputTokensPerMinute},
		"limits.tokens_per_minute":        {d.Limits.TokensPerMinute},
		"limits.max_concurrency":          {d.Limits.MaxConcurrency},
		"limits.count_tokens_per_minute":  {d.Limits.CountTokensPerMinute},
		"prompt_cache.admission":          {d.PromptCache.Admission},
		"prompt_cache.affinity":           {d.PromptCache.Affinity},
		"prompt_cache.prefixes":           {d.PromptCache.Prefixes},
		"min_concurrency":                 {d.MinConcurrency},
		"burst_seconds":                   {d.BurstSeconds},
		"safety_margin":                   {d.SafetyMargin},
		"max_safety_margin":               {d.MaxSafetyMargin},
		"output_reservation":              {d.OutputReservation},
		"jitter_allowance":                {d.JitterAllowance},
		"request_timeout":                 {d.RequestTimeout},
		"headroom_window":                 {d.HeadroomWindow},
		"burst_room":                      {d.BurstRoom},
		"burst_memory":                    {d.BurstMemory},
		"abandoned_stream_drain":          {d.AbandonedStreamDrain},
		"key_probe_interval":              {d.KeyProbeInterval},
		"response_retention":              {d.ResponseRetention},
		"flex.enabled":                    nil, // a bool: the text says false
		"flex.min_slack":                  {d.Flex.MinSlack},
		"flex.timeout":                    {d.Flex.Timeout},
		"retry.base_delay":                {d.Retry.BaseDelay},
		"retry.max_delay":                 {d.Retry.MaxDelay},
		"retry.max_attempts":              {d.Retry.MaxAttempts},
		"retry.budget_ratio":              {d.Retry.BudgetRatio},
		"retry.budget_min":                {d.Retry.BudgetMin},
		"breaker.window":                  {d.Breaker.Window},
		"breaker.min_requests":            {d.Breaker.MinRequests},
		"breaker.failure_ratio":           {d.Breaker.FailureRatio},
		"breaker.consecutive_failures":    {d.Breaker.ConsecutiveFailures},
		"breaker.open_timeout":            {d.Breaker.OpenTimeout},
		"breaker.half_open_probes":        {d.Breaker.HalfOpenProbes},
		"classes.<class>.weight":          classValues(d.Classes, func(c upstream.Class) float64 { return c.Weight }),
		"classes.<class>.max_wait":        classValues(d.Classes, func(c upstream.Class) time.Duration { return c.MaxWait }),
		"classes.<class>.headroom":        classValues(d.Classes, func(c upstream.Class) float64 { return c.Headroom }),
		"batch.max_wait":                  {upstream.BatchMaxWaitDefault},
		"batch.min_time_left":             {upstream.BatchMinTimeLeftDefault},
		"batch.deadline_margin":           {upstream.BatchDeadlineMarginDefault},
		"batch.min_group":                 {upstream.BatchMinGroupDefault},
		"batch.max_requests":              {upstream.BatchMaxRequestsDefault},
		"batch.poll_interval":             {upstream.BatchPollIntervalDefault},
		// Set only with a route (batch.route, batch.classes: required
		// with it); max_bytes is given in MiB.
		"batch.route": nil, "batch.classes": nil, "batch.max_bytes": nil,
		// Required or protocol-dependent: the text says so.
		"name": nil, "protocol": nil, "base_url": nil, "api_key": nil, "api_keys": nil, "orgs": nil, "fallbacks": nil, "fallback_classes": nil,
		"batch_priority": {upstream.BatchPriorityDefault.String()},
	}
	fields := map[string]bool{}
	for _, p := range leafPaths(reflect.TypeFor[upstream.Config](), "") {
		p = regexp.MustCompile(`^classes\.[a-z]+\.`).ReplaceAllString(p, "classes.<class>.")
		fields[p] = true
		_, ok := want[p]
		require.True(t, ok, "field %s: add it to this test", p)
	}
	backticked := regexp.MustCompile("`([^`]*)`")
	seen := map[string]bool{}
	for _, row := range section(t, configDoc(t), "## `upstreams[i]`") {
		require.Len(t, row, 3, "%v", row)
		field := strings.Trim(row[0], "`")
		seen[field] = true
		require.True(t, fields[field], "docs/config.md lists %s, which upstream.Config does not have", field)
		values := want[field]
		if values == nil {
			continue
		}
		var tokens []string
		for _, m := range backticked.FindAllStringSubmatch(row[2], -1) {
			tokens = append(tokens, m[1])
		}
		require.GreaterOrEqual(t, len(tokens), len(values), "%s: default %q", field, row[2])
		for i, v := range values {
			require.True(t, matches(tokens[i], v), "%s: docs say %q, WithDefaults sets %v", field, tokens[i], v)
		}
	}
	for f := range fields {
		require.True(t, seen[f], "docs/config.md has no row for %s", f)
	}
}

// TestDocsProfileTable: the profiles table of docs/config.md states what
// each profile sets.
func TestDocsProfileTable(t *testing.T) {
	t.Parallel()
	cfgs := map[int]upstream.Config{}
	for i, p := range []upstream.Profile{upstream.Balanced, upstream.Latency, upstream.Throughput} {
		cfgs[i+1] = upstream.Config{Name: "a", Protocol: upstream.Anthropic, Profile: p}.WithDefaults()
	}
	rows := map[string]func(upstream.Config) []any{
		"`classes.*.weight` (critical, high, normal, low)": func(c upstream.Config) []any {
			return classValues(c.Classes, func(c upstream.Class) float64 { return c.Weight })
		},
		"`classes.*.max_wait`": func(c upstream.Config) []any {
			return classValues(c.Classes, func(c upstream.Class) time.Duration { return c.MaxWait })
		},
		"`classes.*.headroom`": func(c upstream.Config) []any {
			return classValues(c.Classes, func(c upstream.Class) float64 { return c.Headroom })
		},
		"`retry.base_delay` / `retry.max_delay`": func(c upstream.Config) []any { return []any{c.Retry.BaseDelay, c.Retry.MaxDelay} },
		"`retry.max_attempts`":                   func(c upstream.Config) []any { return []any{c.Retry.MaxAttempts} },
		"`burst_room`":                           func(c upstream.Config) []any { return []any{c.BurstRoom} },
	}
	checked := 0
	for _, row := range section(t, configDoc(t), "### Profiles") {
		values, ok := rows[row[0]]
		if !ok {
			continue
		}
		checked++
		for col := 1; col <= 3; col++ {
			tokens := strings.FieldsFunc(strings.ReplaceAll(row[col], "*", ""), func(r rune) bool { return r == ',' || r == '/' || r == ' ' })
			vs := values(cfgs[col])
			require.Len(t, tokens, len(vs), "%s, column %d: %q", row[0], col, row[col])
			for i, v := range vs {
				require.True(t, matches(tokens[i], v), "%s, column %d: docs say %q, the profile sets %v", row[0], col, tokens[i], v)
			}
		}
	}
	require.Equal(t, len(rows), checked, "every profile setting has its row")
}

// TestDocCommentsStateTheDefaults: every numeric "Defaults to X" in the
// doc comments of Config and its parts states what WithDefaults sets (for
// a class, the four classes' values in order), so godoc tells a library
// user the truth.
func TestDocCommentsStateTheDefaults(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "config.go", nil, parser.ParseComments)
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
	d := upstream.Config{Name: "a", Protocol: upstream.Anthropic}.WithDefaults()
	classes := reflect.ValueOf(d.Classes)
	checked := 0
	var walk func(typ string, v reflect.Value)
	walk = func(typ string, v reflect.Value) {
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			fv := v.Field(i)
			if typ == "Config" && name == "Classes" {
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
	walk("Config", reflect.ValueOf(d))
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
