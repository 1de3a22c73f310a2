package jobstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAttemptErrorsOldRowsReadable: histories written before the outcome
// kind was stored as "kind" hold it as "class"; both decode, and a new
// entry round-trips with its hint and its upstream (old rows have none).
func TestAttemptErrorsOldRowsReadable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := `[{"attempt":1,"status":529,"class":"overload","message":"Overloaded","at":"2026-03-01T12:00:00Z"}]`
	got, err := decodeAttemptErrors([]byte(old))
	require.NoError(t, err)
	require.Equal(t, []AttemptError{{Attempt: 1, Status: 529, Kind: "overload", Message: "Overloaded", At: at}}, got)

	e := AttemptError{Attempt: 2, Status: 429, Kind: "rate", Message: "slow down", RetryAfter: 2 * time.Second, Upstream: "claude-b", At: at}
	got, err = decodeAttemptErrors([]byte("[" + string(encodeAttemptError(e)) + "]"))
	require.NoError(t, err)
	require.Equal(t, []AttemptError{e}, got)
}
