package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// leakyStdPackages are standard packages whose type names a message could
// borrow from a decoder or a %T (json.Number, time.Duration).
var leakyStdPackages = []string{"json", "time", "http", "url", "yaml", "reflect", "strconv", "net", "os", "io"}

// TestNoGoIdentifiersInMessages: no string literal of the module's
// production code (an error, a log line, a help text, a problem's message)
// holds a package-qualified Go identifier such as llm.OpenAI or
// upstream.Key: what a user reads names the protocol, the field or the
// YAML path, never a Go type (issue 27: "The llm.OpenAI API expects a JSON
// payload").
func TestNoGoIdentifiersInMessages(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.Name}} {{.Dir}} {{join .GoFiles " "}}`, "./...").Output()
	require.NoError(t, err)
	names := slices.Clone(leakyStdPackages)
	type pkg struct {
		dir   string
		files []string
	}
	var pkgs []pkg
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 2, line)
		names = append(names, f[0])
		pkgs = append(pkgs, pkg{f[1], f[2:]})
	}
	qualified := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\.[A-Z][A-Za-z0-9_]*`)
	fset := token.NewFileSet()
	var found []string
	for _, p := range pkgs {
		for _, name := range p.files {
			file, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if m := qualified.FindString(s); m != "" {
					found = append(found, fset.Position(lit.Pos()).String()+": "+m)
				}
				return true
			})
		}
	}
	require.Empty(t, found, "Go identifiers in messages: name the protocol, field or YAML path instead")
}
