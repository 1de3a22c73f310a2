package configfile

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Lookup reads an environment variable; os.LookupEnv in production.
type Lookup func(name string) (string, bool)

// Expand replaces ${NAME} and ${NAME:-default} in every scalar value of
// the tree root (keys are left alone), reading the environment through
// lookup; a reference it cannot expand is an *Error at the value's line
// and path. An expanded value is resolved afresh by the decoder, so
// "${CONC:-8}" fills an int field; text that would read as null stays a
// string.
func Expand(root *yaml.Node, lookup Lookup) error { return expandNode(root, "", lookup) }

// envNameRE is what may appear between ${ and } (before an optional :-).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces ${NAME} and ${NAME:-default} in s. A NAME that is
// unset has no value: without a default that is an error naming it. With
// :- the default is also used when NAME is set but empty, as in the shell.
// "$${" stands for a literal "${".
func expandEnv(s string, lookup Lookup) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", s[i:min(len(s), i+40)])
		}
		expr := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !envNameRE.MatchString(name) {
			return "", fmt.Errorf("invalid environment variable name %q in ${%s}", name, expr)
		}
		v, ok := lookup(name)
		switch {
		case hasDef && v == "":
			v = def
		case !ok:
			return "", fmt.Errorf("environment variable %s is not set (set it, or write ${%s:-default})", name, name)
		}
		b.WriteString(v)
	}
}

// expandNode expands environment references in every scalar value of the
// tree (keys are left alone); path is n's YAML path, for the error.
func expandNode(n *yaml.Node, path string, lookup Lookup) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v, err := expandEnv(n.Value, lookup)
		if err != nil {
			return &Error{Line: n.Line, Path: path, Msg: err.Error(), Err: err}
		}
		if v != n.Value {
			// Let the decoder resolve the expanded text afresh, quoted or not,
			// so that "${CONC:-8}" (quoted, as flow mappings require) still
			// fills an int field. Text that would read as null is kept a
			// string so a secret like "null" is not lost.
			n.Value, n.Tag, n.Style = v, "", 0
			switch v {
			case "", "~", "null", "Null", "NULL":
				n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
			}
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			p := n.Content[i-1].Value
			if path != "" {
				p = path + "." + p
			}
			if err := expandNode(n.Content[i], p, lookup); err != nil {
				return err
			}
		}
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := expandNode(c, path, lookup); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandNode(c, fmt.Sprintf("%s[%d]", path, i), lookup); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		// The anchored node is expanded where it is defined; following the
		// alias would expand it a second time, reading "$" in a value that
		// came from the environment as another reference.
	}
	return nil
}
