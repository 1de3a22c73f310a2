package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestUnavailableClassifiesAtTheEdge: the errors of a store that cannot
// answer become ErrUnavailable (the driver's error kept in the chain);
// the request's own faults, the caller's cancel and our sentinels stay as
// they are.
func TestUnavailableClassifiesAtTheEdge(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("inserting job: %w", refused), true},
		{"connect error", &pgconn.ConnectError{}, true},
		{"reset", fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{"eof mid-query", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true},
		{"pool timeout", fmt.Errorf("acquiring: %w", context.DeadlineExceeded), true},
		{"pg admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"pg disk full", &pgconn.PgError{Code: "53100"}, true},
		{"pg read-only standby", &pgconn.PgError{Code: "25006"}, true},
		{"pg connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"pgx conn closed", errors.New("conn closed"), true},
		{"pg unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"pg syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"lease lost", fmt.Errorf("completing job 1: %w", ErrLeaseLost), false},
		{"not found", ErrNotFound, false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := unavailable(context.Background(), tc.err)
			require.Equal(t, tc.want, errors.Is(got, ErrUnavailable), "%v", got)
			if tc.err != nil {
				require.ErrorIs(t, got, tc.err, "the driver's error stays in the chain")
			}
		})
	}
	t.Run("the caller gave up", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NotErrorIs(t, unavailable(ctx, refused), ErrUnavailable)
	})
}
