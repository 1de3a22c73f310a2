package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		lines := bytes.Split(bytes.TrimSpace(errOut.Bytes()), []byte("\n"))
		require.Contains(t, string(lines[len(lines)-1]), "sluice "+name+": usage:", name)
	}
}
