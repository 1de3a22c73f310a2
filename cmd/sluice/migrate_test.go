package main

import (
	"bytes"
	"context"
	"path/filepath"
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
		{[]string{"migrate", "--store", dsn, "status"}, 0, "pending  0001_jobs", ""},
		{[]string{"migrate", "--store", dsn, "up"}, 0, "applied 0001\napplied 0002\napplied 0003\napplied 0004\napplied 0005\napplied 0006\napplied 0007", ""},
		{[]string{"migrate", "--store", dsn, "up"}, 0, "schema is up to date", ""},
		{[]string{"migrate", "--store", dsn, "status"}, 0, "current version: 7", ""},
		{[]string{"migrate", "status", "--store", dsn}, 0, "current version: 7", ""}, // as the README writes it
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
