package main

import (
	"cmp"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/server"
)

// docYAML is one ```yaml block of the docs, with the marker before it.
type docYAML struct {
	where  string // file:line of the block's first line
	marker string // "", "fragment", "fragment: PATH" or "config: mock"
	text   string
}

// markerRE is the comment that may precede a YAML block: a fragment of a
// gateway config (at PATH, e.g. upstreams[]; without PATH, top-level
// fields of a config without its upstreams), or another program's config.
var markerRE = regexp.MustCompile(`^<!-- (fragment(?:: \S+)?|config: mock) -->$`)

func docYAMLBlocks(t *testing.T) []docYAML {
	t.Helper()
	files := []string{filepath.Join("..", "..", "README.md")}
	more, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	var out []docYAML
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			fence := strings.TrimSpace(lines[i])
			if fence != "```yaml" && fence != "```yml" {
				continue
			}
			b := docYAML{where: filepath.Base(f) + ":" + strconv.Itoa(i+2)}
			for j := i - 1; j >= 0; j-- {
				if l := strings.TrimSpace(lines[j]); l != "" {
					if m := markerRE.FindStringSubmatch(l); m != nil {
						b.marker = m[1]
					}
					break
				}
			}
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n") + "\n"
			out = append(out, b)
		}
	}
	return out
}

// docEnv gives every ${VAR} of the docs a value: a URL for a *_URL.
func docEnv(name string) (string, bool) {
	if strings.HasSuffix(name, "_URL") {
		return "https://" + strings.ToLower(name) + ".example", true
	}
	return "v-" + strings.ToLower(name), true
}

// TestDocumentedYAMLLoads: every YAML block of the README and docs/ loads
// with the real loader: a gateway config as a whole, a block marked
// `<!-- fragment: PATH -->` placed at PATH in a config that has an
// upstream, a `<!-- config: mock -->` block as a mock config. An unmarked
// block that is not a whole config fails.
func TestDocumentedYAMLLoads(t *testing.T) {
	t.Parallel()
	blocks := docYAMLBlocks(t)
	require.GreaterOrEqual(t, len(blocks), 5)
	for _, b := range blocks {
		err := loadDocYAML(t, b)
		require.NoError(t, err, "%s (%s): the block does not load; fix it, or mark a fragment with <!-- fragment: PATH --> before it", b.where, cmp.Or(b.marker, "whole config"))
	}
}

func loadDocYAML(t *testing.T, b docYAML) error {
	t.Helper()
	switch {
	case b.marker == "config: mock":
		path := filepath.Join(t.TempDir(), "mock.yaml")
		require.NoError(t, os.WriteFile(path, []byte(b.text), 0o600))
		_, err := mock.LoadConfig(path)
		return err
	case strings.HasPrefix(b.marker, "fragment"):
		doc, err := placeFragment(b.text, strings.TrimPrefix(strings.TrimPrefix(b.marker, "fragment"), ": "))
		if err != nil {
			return err
		}
		_, err = server.ParseConfig(doc, docEnv)
		return err
	default:
		_, err := server.ParseConfig([]byte(b.text), docEnv)
		return err
	}
}

// placeFragment puts text at path (fields and [] for a list's item; ""
// for the top level) in a config, and gives it an upstream when it has
// none, so that it can be loaded as a whole.
func placeFragment(text, path string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, err
	}
	n := doc.Content[0]
	parts := regexp.MustCompile(`\[\]|[^.\[\]]+`).FindAllString(path, -1)
	for i := len(parts) - 1; i >= 0; i-- {
		if parts[i] == "[]" {
			if n.Kind != yaml.SequenceNode {
				n = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}}
			}
			continue
		}
		n = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: parts[i]}, n}}
	}
	hasUpstreams := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		hasUpstreams = hasUpstreams || n.Content[i].Value == "upstreams"
	}
	if !hasUpstreams {
		var up yaml.Node
		if err := yaml.Unmarshal([]byte("upstreams: [{name: anthropic, protocol: anthropic, api_key: k}]"), &up); err != nil {
			return nil, err
		}
		n.Content = append(n.Content, up.Content[0].Content...)
	}
	return yaml.Marshal(n)
}

// TestDocumentedYAMLCheckCatchesMistakes: the docs test fails on a block
// that does not load, marked or not.
func TestDocumentedYAMLCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	for _, b := range []docYAML{
		{text: "clients: [{name: a, key: k}]\n"},                                      // unmarked fragment: no upstreams
		{marker: "fragment: upstreams[]", text: "name: a\nprotocol: x\napi_key: k\n"}, // bad protocol
		{marker: "fragment", text: "clients: [{name: a, kye: k}]\n"},
		{marker: "config: mock", text: "preset: anthropic-tier1\nburst_seconds: 1\n"},
	} {
		require.Error(t, loadDocYAML(t, b), b.text)
	}
	for _, b := range []docYAML{
		{marker: "fragment: upstreams[]", text: "name: a\nprotocol: openai\napi_key: ${K}\n"},
		{marker: "fragment: clients[]", text: "- {name: a, key: k}\n- {name: b, key: j}\n"},
		{marker: "fragment: prices", text: "unknown: refuse\n"},
		{marker: "fragment", text: "clients: [{name: a, key: k}]\n"},
	} {
		require.NoError(t, loadDocYAML(t, b), b.text)
	}
}

// TestDocsTablesAreWhole: no Markdown table of the docs is cut in two by a
// blank line or a paragraph (the second half would render as text).
func TestDocsTablesAreWhole(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	for _, f := range append(files, filepath.Join("..", "..", "README.md")) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(data), "\n")
		inFence := false
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inFence = !inFence
			}
			if inFence || !strings.HasPrefix(l, "|") || i == 0 {
				continue
			}
			prev := lines[i-1]
			if strings.HasPrefix(prev, "|") {
				continue
			}
			// A table starts here: it must have its header separator.
			require.True(t, i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|") && strings.Contains(lines[i+1], "---"),
				"%s:%d: a table row without a header: is a table cut in two above it?", filepath.Base(f), i+1)
		}
	}
}
