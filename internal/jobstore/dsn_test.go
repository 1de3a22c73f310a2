package jobstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{"sqlite:./sluice.db", "sqlite:", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"postgresql://u@h/db", "sqlite://x.db", "x", "sqlite:a?b", "sqlite::memory:", "sqlite:\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		d, addr, err := parseDSN(dsn)
		if err != nil {
			require.ErrorIs(t, err, errBadDSN)
			return
		}
		require.NotEmpty(t, addr)
		switch d {
		case dialectSQLite:
			require.True(t, strings.HasPrefix(dsn, "sqlite:"))
			require.NotContains(t, addr, "?")
		case dialectPostgres:
			require.Equal(t, dsn, addr)
		default:
			t.Fatalf("unknown dialect %q", d)
		}
	})
}
