package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(memServeEnv) == "1" {
		runServeChild() // the gateway of TestLargeBodiesStayWithinTheMemoryBudget
	}
	goleak.VerifyTestMain(m)
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"help"}, {"-h"}, {"--help"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, runMain(context.Background(), args, &out, &errOut))
		for name := range commands {
			require.Contains(t, out.String(), "  "+name+" ", "help for %v", args)
		}
		require.Empty(t, errOut.String())
	}
}

func TestCommandHelpPrintsFlags(t *testing.T) {
	t.Parallel()
	for name := range commands {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, runMain(context.Background(), []string{"help", name}, &out, &errOut), name)
		require.Contains(t, out.String(), "Usage: sluice "+name, name)
	}
}

func TestUnknownCommandIsOneLineAndExits2(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 2, runMain(context.Background(), []string{"frobnicate"}, &out, &errOut))
	require.Equal(t, "sluice: unknown command \"frobnicate\" (run 'sluice help')\n", errOut.String())
}

func TestBadFlagIsAUsageError(t *testing.T) {
	t.Parallel()
	for name := range commands {
		var out, errOut bytes.Buffer
		code := runMain(context.Background(), []string{name, "--no-such-flag"}, &out, &errOut)
		require.Equal(t, 2, code, "%s: %s", name, errOut.String())
		require.Equal(t, "sluice "+name+": usage: flag provided but not defined: -no-such-flag\n", errOut.String(), "one line")
		require.Empty(t, out.String())
	}
}

// TestBadInputIsOneLine: every kind of bad input prints one line and
// exits non-zero.
func TestBadInputIsOneLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--lissen", "x"}, {"serve", "--grace", "soon"}, {"mock", "--rpm", "abc"}, {"migrate", "statuss"},
		{"bench", "nosuch"}, {"demo", "--requests", "0"}, {"jobs", "get"}, {"batch", "run", "x.jsonl"},
		{"batch", "cancel"}, {"demo", "extra"}, {"jobs", "ls", "--server", "ftp://x"},
	} {
		var out, errOut bytes.Buffer
		code := runMain(context.Background(), args, &out, &errOut)
		require.NotZero(t, code, args)
		require.Equal(t, 1, bytes.Count(errOut.Bytes(), []byte("\n")), "%v: %q", args, errOut.String())
		require.True(t, bytes.HasPrefix(errOut.Bytes(), []byte("sluice "+args[0]+": ")), "%v: %q", args, errOut.String())
	}
}

// TestCommandDashHPrintsUsageOnStdout: -h anywhere prints the usage on
// stdout and exits 0.
func TestCommandDashHPrintsUsageOnStdout(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "-h"}, {"batch", "run", "--help"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, runMain(context.Background(), args, &out, &errOut), args)
		require.Contains(t, out.String(), "Usage: sluice "+args[0])
		require.Empty(t, errOut.String())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, runMain(context.Background(), []string{arg}, &out, &errOut), arg)
		require.Regexp(t, `^sluice \S+ .*go1\.\d+`, out.String(), arg)
		require.Empty(t, errOut.String())
	}
}

// TestFlagsBeforeOrAfterArguments: every command takes its flags on either
// side of its positional arguments, and "--" ends the flags.
func TestFlagsBeforeOrAfterArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		pos  []string
		a    string
		n    int
	}{
		{[]string{"status", "--a", "x"}, []string{"status"}, "x", 0},
		{[]string{"--a", "x", "status"}, []string{"status"}, "x", 0},
		{[]string{"run", "in.jsonl", "-n", "3", "--a=y"}, []string{"run", "in.jsonl"}, "y", 3},
		{[]string{"-n", "2", "get", "--", "-a", "b"}, []string{"get", "-a", "b"}, "", 2},
		{nil, []string{}, "", 0},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		a := fs.String("a", "", "")
		n := fs.Int("n", 0, "")
		require.NoError(t, parseFlags(fs, tt.args), "%v", tt.args)
		require.Equal(t, tt.pos, append([]string{}, fs.Args()...), "%v", tt.args)
		require.Equal(t, tt.a, *a, "%v", tt.args)
		require.Equal(t, tt.n, *n, "%v", tt.args)
	}
}

// TestHelpNeverShowsTheKey: the key from the environment is not printed as
// a flag default by -h.
func TestHelpNeverShowsTheKey(t *testing.T) {
	t.Setenv("SLUICE_KEY", "ck-ENV-SECRET")
	for _, name := range []string{"jobs", "batch"} {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, runMain(context.Background(), []string{name, "-h"}, &out, &errOut))
		require.Contains(t, out.String(), "-key key")
		require.NotContains(t, out.String()+errOut.String(), "ck-ENV-SECRET")
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	g := addGatewayFlags(fs)
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, "ck-ENV-SECRET", g.Key(), "the environment's key is used")
	require.NoError(t, fs.Parse([]string{"--key", "ck-flag"}))
	require.Equal(t, "ck-flag", g.Key(), "the flag wins")
}
