package server

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const schemaFile = "../../docs/sluice.schema.json"

// TestConfigSchemaIsUpToDate: docs/sluice.schema.json is what the
// generator writes from today's config types; after changing them run
// `go generate ./internal/server/`.
func TestConfigSchemaIsUpToDate(t *testing.T) {
	t.Parallel()
	want, err := ConfigSchema("../..")
	require.NoError(t, err)
	got, err := os.ReadFile(schemaFile)
	require.NoError(t, err, "run go generate ./internal/server/")
	require.True(t, bytes.Equal(want, got), "docs/sluice.schema.json differs from the config types: run go generate ./internal/server/")
}

func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaFile)
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(ConfigSchemaID, doc))
	s, err := c.Compile(ConfigSchemaID)
	require.NoError(t, err)
	return s
}

// yamlInstance reads YAML as the JSON value a schema validator checks.
func yamlInstance(t *testing.T, text []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(text, &v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return inst
}

// TestExampleConfigsMatchTheSchema: every config the repository ships
// (deploy/, the Helm chart's values, the docs' whole configs) is valid
// under the schema, and loads.
func TestExampleConfigsMatchTheSchema(t *testing.T) {
	t.Parallel()
	s := compiledSchema(t)
	examples := map[string][]byte{}
	for _, f := range []string{"../../deploy/compose/sluice.yaml", "../../deploy/docker/sluice.yaml"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		examples[f] = b
	}
	values, err := filepath.Glob("../../deploy/helm/sluice/values*.yaml")
	require.NoError(t, err)
	for _, f := range values {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var v struct {
			Config yaml.Node `yaml:"config"`
		}
		require.NoError(t, yaml.Unmarshal(b, &v))
		if v.Config.Kind == 0 {
			continue
		}
		cfg, err := yaml.Marshal(&v.Config)
		require.NoError(t, err)
		examples[f+" (config)"] = cfg
	}
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	for _, f := range docs {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		rest := string(b)
		for n := 1; ; n++ {
			var before, block string
			var ok bool
			if before, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
				break
			}
			block, rest, _ = strings.Cut(rest, "```")
			if strings.HasSuffix(strings.TrimSpace(before), "-->") {
				continue // a fragment or another program's config (cmd/sluice's docs test loads those)
			}
			examples[filepath.Base(f)+" block "+string(rune('0'+n))] = []byte(block)
		}
	}
	require.GreaterOrEqual(t, len(examples), 6)
	for name, text := range examples {
		require.NoError(t, s.Validate(yamlInstance(t, text)), "%s does not match docs/sluice.schema.json", name)
		_, err := ParseConfig(text, exampleEnv(text))
		require.NoError(t, err, name)
	}
}

// TestSchemaRefusesMistakes: the schema catches what an editor should
// underline: unknown fields, wrong kinds, durations without a unit, values
// outside an enum; and takes environment references for numbers.
func TestSchemaRefusesMistakes(t *testing.T) {
	t.Parallel()
	s := compiledSchema(t)
	const up = "upstreams:\n  - name: a\n    protocol: anthropic\n    api_key: k\n"
	for _, bad := range []string{
		up + "    limits: {request_per_minute: 50}\n",
		up + "    limits: {requests_per_minute: fifty}\n",
		up + "    request_timeout: 10\n",
		up + "    protocol_: openai\n",
		"upstreams:\n  - {name: a, protocol: antropic}\n",
		up + "clients: [{name: c, key: k, role: root}]\n",
		up + "jobs: {retry: {base_delay: fast}}\n",
		up + "lisen: x\n",
	} {
		require.Error(t, s.Validate(yamlInstance(t, []byte(bad))), bad)
	}
	for _, good := range []string{
		up + "    limits: {requests_per_minute: 50, max_concurrency: '${CONC:-8}'}\n    request_timeout: 1m30s\n",
		up + "    api_keys: [k1, {key: k2, org: acme}]\n    fallback_classes: [critical, 1]\n",
		up + "clients: [{name: c, key: k, role: admin, default_priority: low, max_priority: 0}]\n",
	} {
		require.NoError(t, s.Validate(yamlInstance(t, []byte(good))), good)
	}
}

// exampleEnv gives the ${VAR}s of an example text a value: a variable
// written with a default is unset (the default is the example's value),
// any other gets a placeholder (a URL for a *_URL).
func exampleEnv(text []byte) LookupEnv {
	withDefault := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):-`).FindAllSubmatch(text, -1) {
		withDefault[string(m[1])] = true
	}
	return func(name string) (string, bool) {
		switch {
		case withDefault[name]:
			return "", false
		case strings.HasSuffix(name, "_URL"):
			return "https://" + strings.ToLower(name) + ".example", true
		}
		return "v-" + strings.ToLower(name), true
	}
}
