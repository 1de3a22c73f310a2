package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"migrate", "--store", dsn, "status"}, 0, "no store at " + strings.TrimPrefix(dsn, "sqlite:") + " (nothing applied yet)", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "nothing to revert (no store at", ""},
		{[]string{"migrate", "--store", dsn, "up"}, 0, "applied 0001\napplied 0002\napplied 0003\napplied 0004\napplied 0005\napplied 0006\napplied 0007\napplied 0008\napplied 0009\napplied 0010\napplied 0011", ""},
		{[]string{"migrate", "--store", dsn, "up"}, 0, "schema is up to date", ""},
		{[]string{"migrate", "--store", dsn, "status"}, 0, "current version: 11", ""},
		{[]string{"migrate", "status", "--store", dsn}, 0, "current version: 11", ""}, // as the README writes it
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0011", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0010", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0009", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0008", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0007", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0006", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0005", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0004", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0003", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0002", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "reverted 0001", ""},
		{[]string{"migrate", "--store", dsn, "down"}, 0, "nothing to revert", ""},
		{[]string{"migrate", "--store", dsn, "sideways"}, 2, "", "unknown action"},
		{[]string{"migrate", "--store", dsn}, 2, "", "want exactly one"},
		{[]string{"migrate", "--store", "mysql://x", "up"}, 1, "", "bad store address"},
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		code := runMain(context.Background(), tc.args, &out, &errOut)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut.String())
		require.Contains(t, out.String(), tc.out, tc.args)
		require.Contains(t, errOut.String(), tc.err, tc.args)
	}
}

// TestMigrateReadCreatesNothing: status and down on a SQLite file that is
// not there say so, exit 0 and leave no file behind; up creates it.
func TestMigrateReadCreatesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none.db")
	for _, action := range []string{"status", "down"} {
		var out, errOut bytes.Buffer
		code := runMain(context.Background(), []string{"migrate", "--store", "sqlite:" + path, action}, &out, &errOut)
		require.Equal(t, 0, code, "%s: %s", action, errOut.String())
		require.Contains(t, out.String(), "no store at "+path+" (nothing applied yet)", action)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, fs.ErrNotExist, "%s created the store", action)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, runMain(context.Background(), []string{"migrate", "--store", "sqlite:" + path, "up"}, &out, &errOut), errOut.String())
	_, err := os.Stat(path)
	require.NoError(t, err)
}
