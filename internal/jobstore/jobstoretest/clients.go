package jobstoretest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

func clientKey(secret string, now time.Time) jobstore.ClientKey {
	d := sha256.Sum256([]byte(secret))
	return jobstore.ClientKey{SHA256: hex.EncodeToString(d[:]), Prefix: secret[:4], CreatedAt: now}
}

// testClients: runtime clients are created once per name, read back as
// written, updated with optimistic versions, revoked as tombstones that
// may be created again; ClientsVersion changes with every write, and
// concurrent creators of one name make one client.
func testClients(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	v0, err := s.ClientsVersion(ctx)
	require.NoError(t, err)
	list, err := s.ListClients(ctx)
	require.NoError(t, err)
	require.Empty(t, list)

	k1 := clientKey("sk-one", T0)
	a, err := s.CreateClient(ctx, jobstore.CreateClientParams{Name: "team-a", Spec: []byte(`{"role":"client"}`), Keys: []jobstore.ClientKey{k1}, Now: T0})
	require.NoError(t, err)
	require.Positive(t, a.Version)
	v1, err := s.ClientsVersion(ctx)
	require.NoError(t, err)
	require.NotEqual(t, v0, v1)

	_, err = s.CreateClient(ctx, jobstore.CreateClientParams{Name: "team-a", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k1}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)

	got, err := s.GetClient(ctx, "team-a")
	require.NoError(t, err)
	require.JSONEq(t, `{"role":"client"}`, string(got.Spec))
	require.Equal(t, []jobstore.ClientKey{k1}, got.Keys)
	require.Equal(t, a.Version, got.Version)
	require.True(t, got.CreatedAt.Equal(T0))

	// An update replaces spec and keys; a stale IfVersion is refused.
	k2 := clientKey("sk-two", T0.Add(time.Minute))
	k1grace := k1
	k1grace.ExpiresAt = T0.Add(time.Hour)
	up, err := s.UpdateClient(ctx, jobstore.UpdateClientParams{Name: "team-a", Spec: []byte(`{"role":"admin"}`),
		Keys: []jobstore.ClientKey{k2, k1grace}, IfVersion: a.Version, Now: T0.Add(time.Minute)})
	require.NoError(t, err)
	require.NotEqual(t, a.Version, up.Version)
	require.True(t, up.CreatedAt.Equal(T0))
	_, err = s.UpdateClient(ctx, jobstore.UpdateClientParams{Name: "team-a", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k2}, IfVersion: a.Version, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)
	_, err = s.UpdateClient(ctx, jobstore.UpdateClientParams{Name: "nobody", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k2}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	got, err = s.GetClient(ctx, "team-a")
	require.NoError(t, err)
	require.Equal(t, []jobstore.ClientKey{k2, k1grace}, got.Keys)
	require.True(t, got.UpdatedAt.Equal(T0.Add(time.Minute)))
	v2, err := s.ClientsVersion(ctx)
	require.NoError(t, err)
	require.NotEqual(t, v1, v2)

	// Revoking leaves the name free and changes the version.
	require.NoError(t, s.DeleteClient(ctx, jobstore.DeleteClientParams{Name: "team-a", Now: T0.Add(2 * time.Minute)}))
	require.ErrorIs(t, s.DeleteClient(ctx, jobstore.DeleteClientParams{Name: "team-a", Now: T0}), jobstore.ErrNotFound)
	_, err = s.GetClient(ctx, "team-a")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.UpdateClient(ctx, jobstore.UpdateClientParams{Name: "team-a", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k2}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	v3, err := s.ClientsVersion(ctx)
	require.NoError(t, err)
	require.NotEqual(t, v2, v3)
	list, err = s.ListClients(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	again, err := s.CreateClient(ctx, jobstore.CreateClientParams{Name: "team-a", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k1}, Now: T0.Add(3 * time.Minute)})
	require.NoError(t, err)
	require.True(t, again.CreatedAt.Equal(T0.Add(3*time.Minute)))

	// Bad params name the field.
	for _, p := range []jobstore.CreateClientParams{
		{Spec: []byte(`{}`), Keys: []jobstore.ClientKey{k1}, Now: T0},
		{Name: "x", Spec: []byte(`{`), Keys: []jobstore.ClientKey{k1}, Now: T0},
		{Name: "x", Spec: []byte(`{}`), Now: T0},
		{Name: "x", Spec: []byte(`{}`), Keys: []jobstore.ClientKey{{SHA256: "beef"}}, Now: T0},
	} {
		_, err := s.CreateClient(ctx, p)
		require.ErrorIs(t, err, jobstore.ErrInvalid)
	}

	// Concurrent creators of one name: exactly one wins; every client of
	// several names is listed in name order.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		wg.Go(func() {
			_, err := s.CreateClient(ctx, jobstore.CreateClientParams{Name: "race", Spec: []byte(`{}`),
				Keys: []jobstore.ClientKey{clientKey(fmt.Sprintf("sk-race-%d", i), T0)}, Now: T0})
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
				return
			}
			require.ErrorIs(t, err, jobstore.ErrConflict)
		})
	}
	wg.Wait()
	require.Equal(t, 1, won)
	list, err = s.ListClients(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "race", list[0].Name)
	require.Equal(t, "team-a", list[1].Name)
}
