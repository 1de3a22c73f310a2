package upstream_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/upstream"
)

// yamlBlock is one ```yaml fence of a Markdown file.
type yamlBlock struct {
	file string // relative to the repository's root
	n    int    // 1-based, among the file's YAML blocks
	line int    // of the fence
	text string
}

// docYAMLBlocks returns every YAML block of the README and docs/*.md.
func docYAMLBlocks(t *testing.T) []yamlBlock {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	files = append(files, "../README.md")
	var out []yamlBlock
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		name := strings.TrimPrefix(f, "../")
		var cur *yamlBlock
		for i, l := range strings.Split(string(b), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(l) == "```yaml":
				cur = &yamlBlock{file: name, line: i + 1}
			case cur != nil && strings.TrimSpace(l) == "```":
				cur.n = 1
				if len(out) > 0 && out[len(out)-1].file == name {
					cur.n = out[len(out)-1].n + 1
				}
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += l + "\n"
			}
		}
		require.Nil(t, cur, "%s: a YAML block is not closed", name)
	}
	return out
}

// TestDocExamplesDecode: every YAML block in the docs parses, and every
// entry of an upstreams: list in them decodes into the public Config with
// unknown fields rejected and validates, so no example shows a field or a
// shape the gateway and the library would refuse. ${VAR} references stay
// as they are (the gateway expands them; as strings they are valid keys).
func TestDocExamplesDecode(t *testing.T) {
	t.Parallel()
	entries := map[string]int{}
	for _, b := range docYAMLBlocks(t) {
		where := fmt.Sprintf("%s, YAML block %d (line %d)", b.file, b.n, b.line)
		var root yaml.Node
		require.NoError(t, yaml.Unmarshal([]byte(b.text), &root), "%s does not parse", where)
		if root.Kind != yaml.DocumentNode || root.Content[0].Kind != yaml.MappingNode {
			continue
		}
		m := root.Content[0].Content
		for i := 0; i+1 < len(m); i += 2 {
			if m[i].Value != "upstreams" {
				continue
			}
			require.Equal(t, yaml.SequenceNode, m[i+1].Kind, "%s: upstreams is not a list", where)
			for j, entry := range m[i+1].Content {
				raw, err := yaml.Marshal(entry)
				require.NoError(t, err)
				dec := yaml.NewDecoder(bytes.NewReader(raw))
				dec.KnownFields(true)
				var c upstream.Config
				require.NoError(t, dec.Decode(&c), "%s, upstreams[%d] does not decode", where, j)
				require.NoError(t, c.Validate(), "%s, upstreams[%d] is not valid", where, j)
				require.NoError(t, c.WithDefaults().Validate(), "%s, upstreams[%d] defaulted is not valid", where, j)
				entries[b.file]++
			}
		}
	}
	require.Positive(t, entries["docs/config.md"], "no upstream entry found in docs/config.md")
	require.Positive(t, entries["docs/pools.md"], "no upstream entry found in docs/pools.md")
}
