package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docCommand is one command line of a fenced code block in the docs.
type docCommand struct {
	where string // file:line
	words []string
}

// docCommands returns the command lines of the fenced code blocks of the
// README and docs/*.md (but not ```text blocks, which show output) (a "$ " prompt stripped, "\" continuations joined,
// comments and what follows a pipe, redirection or && dropped).
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files := []string{filepath.Join("..", "..", "README.md")}
	more, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	files = append(files, more...)
	var out []docCommand
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(data), "\n")
		in, output := false, false
		for i := 0; i < len(lines); i++ {
			l := strings.TrimSpace(lines[i])
			if strings.HasPrefix(l, "```") {
				in = !in
				// A ```text block shows output, not commands.
				output = in && strings.TrimPrefix(l, "```") == "text"
				continue
			}
			if !in || output {
				continue
			}
			start := i
			for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
			}
			l = strings.TrimPrefix(l, "$ ")
			out = append(out, docCommand{where: filepath.Base(f) + ":" + strconv.Itoa(start+1), words: shellWords(l)})
		}
	}
	return out
}

// shellWords splits a command line as a shell would for these examples:
// quotes group, an unquoted # starts a comment, and |, >, ;, && end the
// command.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord, r == '|', r == '>', r == ';', r == '&' && strings.HasPrefix(s[i:], "&&"):
			flush()
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// TestDocumentedCommandsParse parses every `sluice …` and
// `go run ./cmd/sluice …` line of the docs against the real flag sets,
// without running it: an unknown command, flag or subcommand fails.
func TestDocumentedCommandsParse(t *testing.T) {
	t.Parallel()
	n := 0
	for _, dc := range docCommands(t) {
		w := dc.words
		switch {
		case len(w) >= 3 && w[0] == "go" && w[1] == "run" && w[2] == "./cmd/sluice":
			w = w[3:]
		case len(w) >= 1 && w[0] == "sluice":
			w = w[1:]
		default:
			continue
		}
		if len(w) == 0 || !regexp.MustCompile(`^-{0,2}[a-z][a-z-]*$`).MatchString(w[0]) {
			continue // output such as "sluice serve: …", or prose like "sluice (root package)"
		}
		n++
		require.NoError(t, checkCommandLine(w), "%s: sluice %s", dc.where, strings.Join(w, " "))
	}
	require.Greater(t, n, 10, "the docs' command lines were found")
}

// checkCommandLine parses args as runMain would, without running the
// command.
func checkCommandLine(args []string) error {
	switch args[0] {
	case "--version", "-version", "version", "help", "-h", "--help":
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return errors.New("unknown command " + args[0])
	}
	fs := newFlagSet(c)
	parseOnly.Store(fs, struct{}{})
	defer parseOnly.Delete(fs)
	err := c.run(context.Background(), fs, args[1:], io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if !errors.Is(err, errParsedOnly) {
		return err
	}
	if c.subs == nil {
		return nil
	}
	first := fs.Arg(0)
	if first == "" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		first = args[1] // bench takes its scenario before parsing
	}
	if first != "" && !slices.Contains(c.subs, first) {
		return errors.New("unknown " + c.name + " subcommand " + first)
	}
	return nil
}

func TestCheckCommandLineCatchesMistakes(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{
		{"serve", "--lissen", ":8080"},
		{"migrate", "statuss"},
		{"jobs", "explode"},
		{"batch", "go", "x.jsonl"},
		{"frobnicate"},
		{"bench", "nosuch"},
	} {
		require.Error(t, checkCommandLine(bad), bad)
	}
	for _, good := range [][]string{
		{"migrate", "status", "--store", "sqlite:x.db"},
		{"jobs", "ls", "--state", "dead", "--key", "k", "--server", "http://h:1"},
		{"batch", "cancel", "b1"},
		{"bench", "goodput", "--quick"},
		{"demo", "--keep"},
	} {
		require.NoError(t, checkCommandLine(good), good)
	}
}

// protectedCurl matches a curl to the gateway's protected routes: the job
// and batch API, upstream control and the proxied provider routes.
var protectedCurl = regexp.MustCompile(`(localhost|127\.0\.0\.1):8080/(v1/(jobs|batches|upstreams)|[a-z0-9-]+/v1/)`)

// TestDocumentedCurlsSendAKey: a curl example against a protected route
// sends a client key, so it works as written once clients are configured.
func TestDocumentedCurlsSendAKey(t *testing.T) {
	t.Parallel()
	n := 0
	for _, dc := range docCommands(t) {
		if len(dc.words) == 0 || dc.words[0] != "curl" {
			continue
		}
		line := strings.Join(dc.words, " ")
		if !protectedCurl.MatchString(line) {
			continue
		}
		n++
		hasKey := strings.Contains(strings.ToLower(line), "x-api-key: $") || strings.Contains(line, "Authorization: Bearer $")
		require.True(t, hasKey, "%s: curl to a protected route without a key from the environment: %s", dc.where, line)
	}
	require.Greater(t, n, 5, "the docs' curl examples were found")
}
