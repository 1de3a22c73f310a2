package jobstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// testResponseKeys: a stored Response's key is read back as written, per
// upstream, until it expires; a second record of the same id replaces the
// first; the sweep (the retention cleaner's) deletes the expired records
// only, Limit at a time; bad records are refused with ErrInvalid.
func testResponseKeys(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	day := 24 * time.Hour
	put := func(upstream, id, key string, created time.Time, ttl time.Duration) {
		t.Helper()
		require.NoError(t, s.PutResponseKey(ctx, jobstore.PutResponseKeyParams{ResponseKey: jobstore.ResponseKey{
			Upstream: upstream, ID: id, Key: key, CreatedAt: created, ExpiresAt: created.Add(ttl)}}))
	}
	get := func(upstream, id string, now time.Time) (jobstore.ResponseKey, error) {
		return s.GetResponseKey(ctx, jobstore.GetResponseKeyParams{Upstream: upstream, ID: id, Now: now})
	}

	put("gpt", "resp_1", "aaaa1111", T0, 30*day)
	put("other", "resp_1", "bbbb2222", T0, time.Hour) // the same id on another upstream
	got, err := get("gpt", "resp_1", T0.Add(29*day))
	require.NoError(t, err)
	require.Equal(t, jobstore.ResponseKey{Upstream: "gpt", ID: "resp_1", Key: "aaaa1111", CreatedAt: T0, ExpiresAt: T0.Add(30 * day)}, got)
	got, err = get("other", "resp_1", T0)
	require.NoError(t, err)
	require.Equal(t, "bbbb2222", got.Key)
	_, err = get("gpt", "resp_1", T0.Add(30*day))
	require.ErrorIs(t, err, jobstore.ErrNotFound, "expired")
	_, err = get("gpt", "resp_none", T0)
	require.ErrorIs(t, err, jobstore.ErrNotFound)

	put("gpt", "resp_1", "cccc3333", T0.Add(time.Minute), 30*day) // recorded again: replaced
	got, err = get("gpt", "resp_1", T0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "cccc3333", got.Key)
	require.True(t, got.CreatedAt.Equal(T0.Add(time.Minute)))

	// The sweep: three more expire at T0+1h; Limit 2 takes two, then the
	// rest; the unexpired record stays.
	for _, id := range []string{"resp_2", "resp_3", "resp_4"} {
		put("gpt", id, "aaaa1111", T0, time.Hour)
	}
	n, err := s.DeleteResponseKeys(ctx, jobstore.DeleteResponseKeysParams{Now: T0.Add(time.Hour - time.Second), Limit: 2})
	require.NoError(t, err)
	require.Zero(t, n, "nothing expired yet")
	n, err = s.DeleteResponseKeys(ctx, jobstore.DeleteResponseKeysParams{Now: T0.Add(time.Hour), Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.DeleteResponseKeys(ctx, jobstore.DeleteResponseKeysParams{Now: T0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 2, n, "the third and other's resp_1")
	_, err = get("gpt", "resp_1", T0.Add(time.Hour))
	require.NoError(t, err, "an unexpired record survives the sweep")

	for _, bad := range []jobstore.ResponseKey{
		{ID: "resp_x", Key: "k", CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)},
		{Upstream: "gpt", Key: "k", CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)},
		{Upstream: "gpt", ID: "resp_x", CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)},
		{Upstream: "gpt", ID: "resp_x", Key: "k", ExpiresAt: T0.Add(time.Hour)},
		{Upstream: "gpt", ID: "resp_x", Key: "k", CreatedAt: T0, ExpiresAt: T0},
	} {
		require.ErrorIs(t, s.PutResponseKey(ctx, jobstore.PutResponseKeyParams{ResponseKey: bad}), jobstore.ErrInvalid, "%+v", bad)
	}
}
