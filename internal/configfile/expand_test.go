package configfile

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExpand: references in values are replaced from the environment,
// defaults apply to unset and empty variables, $${ is a literal ${, keys
// and aliases are left alone, an expanded "null" stays a string, and a
// reference that cannot be expanded is an Error at its line and path.
func TestExpand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"KEY": "sk-1", "EMPTY": "", "NUM": "8", "NUL": "null", "DOLLAR": "${KEY}"}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	for _, tc := range []struct {
		name, yaml string
		want       map[string]any
		errPath    string
		errLine    int
	}{
		{"plain", "a: ${KEY}\nb: x${KEY}y", map[string]any{"a": "sk-1", "b": "xsk-1y"}, "", 0},
		{"default when unset or empty", "a: ${NOPE:-d}\nb: ${EMPTY:-e}\nc: ${KEY:-f}", map[string]any{"a": "d", "b": "e", "c": "sk-1"}, "", 0},
		{"resolved afresh", `a: "${NUM}"`, map[string]any{"a": 8}, "", 0},
		{"null stays a string", "a: ${NUL}\nb: ${EMPTY}", map[string]any{"a": "null", "b": ""}, "", 0},
		{"literal", "a: $${KEY}", map[string]any{"a": "${KEY}"}, "", 0},
		{"expanded once", "a: ${DOLLAR}", map[string]any{"a": "${KEY}"}, "", 0},
		{"keys untouched", "${KEY}: 1", map[string]any{"${KEY}": 1}, "", 0},
		{"alias", "a: &x ${KEY}\nb: *x", map[string]any{"a": "sk-1", "b": "sk-1"}, "", 0},
		{"unset", "up:\n  - key: ${NOPE}", nil, "up[0].key", 2},
		{"unterminated", "a: ${KEY", nil, "a", 1},
		{"bad name", "a: ${1X}", nil, "a", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root, err := Parse([]byte(tc.yaml))
			require.NoError(t, err)
			err = Expand(root, lookup)
			if tc.errPath != "" {
				var ce *Error
				require.True(t, errors.As(err, &ce), "%v", err)
				require.Equal(t, tc.errPath, ce.Path)
				require.Equal(t, tc.errLine, ce.Line)
				return
			}
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, root.Decode(&got))
			require.Equal(t, tc.want, got)
		})
	}
}
