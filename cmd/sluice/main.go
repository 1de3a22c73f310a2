// Command sluice is the Sluice CLI: the gateway (serve), the mock provider
// (mock), the demo, benchmarks, batches, jobs and migrations.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// command is one subcommand. Each lives in a file named after it and
// registers itself from init.
type command struct {
	name    string
	summary string // one line for `sluice help`
	usage   string // argument synopsis, e.g. "[flags] input.jsonl"
	// run executes the command. It gets a fresh FlagSet named after the
	// command; a returned error is printed as one line and exits non-zero.
	run func(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error
	// subs, when set, are the words the first positional argument may be
	// (subcommands, scenarios): the docs test checks documented command
	// lines against them.
	subs []string
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name) // programming error at init, not reachable from input
	}
	commands[c.name] = c
}

// errUsage marks an error caused by the command line; main exits 2 for it.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runMain runs the CLI and returns the exit code; tests call it directly.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(stdout, currentBuild())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fs := newFlagSet(c)
				_ = c.run(ctx, fs, []string{"-h"}, stdout)
				writeHelp(fs, stdout)
				return 0
			}
		}
		printHelp(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q (run 'sluice help')\n", args[0])
		return 2
	}
	fs := newFlagSet(c)
	err := c.run(context.WithValue(ctx, stderrKey{}, stderr), fs, args[1:], stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		writeHelp(fs, stdout)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "sluice %s: %v\n", c.name, oneLine(err))
		return 2
	default:
		fmt.Fprintf(stderr, "sluice %s: %v\n", c.name, oneLine(err))
		return 1
	}
}

// stderrKey carries runMain's stderr to the commands that log (serve):
// the command signature has only stdout.
type stderrKey struct{}

// stderrOf returns the stderr runMain was given, else os.Stderr.
func stderrOf(ctx context.Context) io.Writer {
	if w, ok := ctx.Value(stderrKey{}).(io.Writer); ok {
		return w
	}
	return os.Stderr
}

// writerIsTerminal reports whether w is a terminal.
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// newFlagSet returns the command's flag set. What the flag package prints
// (the usage, its own error message) goes to a buffer: -h copies it to
// stdout (writeHelp), a bad flag discards it, so that the error is one
// line (runMain's).
func newFlagSet(c command) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+c.name, flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	fs.Usage = func() {
		if b, ok := fs.Output().(*bytes.Buffer); ok {
			b.Reset() // drop flag's error line; the usage alone
		}
		fmt.Fprintf(fs.Output(), "Usage: sluice %s %s\n\n%s\n\nFlags:\n", c.name, c.usage, c.summary)
		fs.PrintDefaults()
	}
	return fs
}

// writeHelp copies the usage a -h printed into fs's buffer to w.
func writeHelp(fs *flag.FlagSet, w io.Writer) {
	if b, ok := fs.Output().(*bytes.Buffer); ok {
		_, _ = w.Write(b.Bytes())
	}
}

// parseFlags parses args into fs, flags before or after the positional
// arguments alike (`sluice migrate status --store DSN` as well as
// `sluice migrate --store DSN status`); everything after "--" is
// positional. fs.Args() then holds the positional arguments in order.
// Command-line errors are usage errors (flag has already printed the
// details).
func parseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	// Leave the positional arguments in fs.Args(): parsing "--" first stops
	// at once and keeps the flags already set.
	_ = fs.Parse(append([]string{"--"}, pos...))
	if _, ok := parseOnly.Load(fs); ok {
		return errParsedOnly
	}
	return nil
}

// parseOnly holds the flag sets of parse-only runs (the docs test checks
// every documented command line against the real flags without running
// it): parseFlags returns errParsedOnly for them once parsing succeeded.
var parseOnly sync.Map // *flag.FlagSet -> struct{}

var errParsedOnly = errors.New("parsed only")

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "Sluice keeps LLM traffic flowing: a priority queue, quota admission, retries and a durable job queue in front of provider APIs.")
	fmt.Fprintln(w, "\nUsage: sluice <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice <command> -h' for a command's flags, 'sluice --version' for the version.")
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}
