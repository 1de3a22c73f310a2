package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
)

// FuzzAuthHeader: whatever x-api-key and Authorization carry, clientKey
// returns a trimmed key (x-api-key first, then a Bearer token), and the
// config's client set accepts exactly the configured keys, naming their client; in
// open mode every caller is an admin with a name that never holds the key.
func FuzzAuthHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"ck-alice", ""}, {"", "Bearer ck-bob"}, {"", "bearer   ck-bob  "}, {" ", "Basic ck-bob"},
		{"", "Bearer"}, {"", "Bearer "}, {"ck-root\t", "Bearer ck-bob"}, {"", "BEARER ck-alice"}, {"\x00", "Bearer \x00"},
	} {
		f.Add(s[0], s[1])
	}
	cs := clients.NewSet(Config{Clients: []clients.Config{{Name: "alice", Key: "ck-alice"}, {Name: "bob", Key: "ck-bob", Keys: []string{"ck-bob-2"}},
		{Name: "root", Key: "ck-root", Role: clients.RoleAdmin}}}.WithDefaults().Clients, nil, time.Now)
	open := clients.NewSet(nil, nil, time.Now)
	owner := map[string]string{"ck-alice": "alice", "ck-bob": "bob", "ck-bob-2": "bob", "ck-root": "root"}
	f.Fuzz(func(t *testing.T, apiKey, authorization string) {
		h := http.Header{}
		if apiKey != "" {
			h.Set("X-Api-Key", apiKey)
		}
		if authorization != "" {
			h.Set("Authorization", authorization)
		}
		key := clientKey(h)
		require.Equal(t, strings.TrimSpace(key), key)
		if k := strings.TrimSpace(apiKey); k != "" {
			require.Equal(t, k, key, "x-api-key comes first")
		} else if a := strings.TrimSpace(authorization); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			require.Equal(t, strings.TrimSpace(a[7:]), key)
		} else {
			require.Empty(t, key)
		}
		cl, ok := cs.Authenticate(key)
		name, known := owner[key]
		require.Equal(t, known, ok)
		if ok {
			require.Equal(t, name, cl.Name)
			require.Equal(t, name == "root", cl.Admin)
		}
		ocl, ok := open.Authenticate(key)
		require.True(t, ok)
		require.True(t, ocl.Admin)
		if key != "" {
			// Named by a digest of the key, never by the key: a short key
			// may still appear in the hex by chance ("7" in key-7902699b).
			d := sha256.Sum256([]byte(key))
			require.Equal(t, "key-"+hex.EncodeToString(d[:4]), ocl.Name)
		}
	})
}
