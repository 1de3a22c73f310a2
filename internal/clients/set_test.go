package clients

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/jobstore"
)

const webKey = "ck-web-client-key"

var adminClients = []Config{
	{Name: "ops", Key: "ck-ops-admin-key", Role: RoleAdmin},
	{Name: "web", Key: webKey},
}

func digest(k string) string {
	d := sha256.Sum256([]byte(k))
	return hex.EncodeToString(d[:])
}

// TestClientKeysExpire: a runtime client's key stops at its client's
// expires_at and at its own end (a rotation's grace), read on the clock.
func TestClientKeysExpire(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	end := now.Add(time.Hour)
	rc := []Runtime{
		{Name: "graced", Spec: Spec{}.WithDefaults(), Keys: []jobstore.ClientKey{
			{SHA256: digest("k-new")}, {SHA256: digest("k-old"), ExpiresAt: now.Add(time.Minute)}}},
		{Name: "expiring", Spec: func() Spec { s := Spec{}.WithDefaults(); s.ExpiresAt = &end; return s }(),
			Keys: []jobstore.ClientKey{{SHA256: digest("k-exp")}}},
		{Name: "web", Spec: Spec{}.WithDefaults(), Keys: []jobstore.ClientKey{{SHA256: digest("k-shadow")}}},
	}
	at := now
	cs := NewSet(withDefaults(adminClients), rc, func() time.Time { return at })
	for _, tc := range []struct {
		at   time.Duration
		key  string
		name string
		ok   bool
	}{
		{0, "k-new", "graced", true},
		{0, "k-old", "graced", true},
		{time.Minute, "k-old", "", false},
		{time.Minute, "k-new", "graced", true},
		{59 * time.Minute, "k-exp", "expiring", true},
		{time.Hour, "k-exp", "", false},
		{0, "k-shadow", "", false}, // a config name is the config's
		{0, webKey, "web", true},
	} {
		at = now.Add(tc.at)
		cl, ok := cs.Authenticate(tc.key)
		require.Equal(t, tc.ok, ok, "%s at +%s", tc.key, tc.at)
		require.Equal(t, tc.name, cl.Name)
	}
	// An open gateway stays open: runtime clients need config clients.
	require.True(t, NewSet(nil, rc, time.Now).Open())
}

// TestKeyRotation: every key of a client (key, keys, key_sha256) is valid
// together, and each names the same client.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	old, next, hashed := "ck-old", "ck-new", "ck-hashed"
	cs := NewSet(withDefaults([]Config{{Name: "web", Key: old, Keys: []string{next},
		KeySHA256: fmt.Sprintf("%X", sha256.Sum256([]byte(hashed))), Role: RoleAdmin}}), nil, time.Now)
	for _, k := range []string{old, next, hashed} {
		cl, ok := cs.Authenticate(k)
		require.True(t, ok, k)
		require.Equal(t, "web", cl.Name)
		require.True(t, cl.Admin)
	}
	_, ok := cs.Authenticate("ck-other")
	require.False(t, ok)
	_, ok = cs.Authenticate(digest(hashed))
	require.False(t, ok, "the digest itself is no key")
	_, ok = cs.Authenticate("")
	require.False(t, ok, "no key")
}

// TestRegistryMerge: the config's clients come first and shadow a runtime
// client of the same name; a reload keeps the runtime clients and a poll
// the config's; each change reaches the admission layer and the names in
// order; a gateway without config clients ignores runtime clients.
func TestRegistryMerge(t *testing.T) {
	t.Parallel()
	type applied struct {
		admitted []string
		names    []string
	}
	var got []applied
	r := NewRegistry(withDefaults(adminClients), time.Now, func(a []admit.Client, names []string) {
		var an []string
		for _, c := range a {
			an = append(an, c.Name)
		}
		got = append(got, applied{an, names})
	})
	require.Empty(t, got, "the first clients are the caller's to apply")
	spec := Spec{Budget: admit.Budget{Day: 3}}.WithDefaults()
	r.SetRuntime([]Runtime{{Name: "web", Spec: spec, Keys: []jobstore.ClientKey{{SHA256: digest("k-shadow")}}},
		{Name: "team", Spec: spec, Keys: []jobstore.ClientKey{{SHA256: digest("k-team")}}}})
	require.Equal(t, applied{[]string{"ops", "web", "team"}, []string{"ops", "web", "team"}}, got[0])
	cl, ok := r.Set().Authenticate("k-team")
	require.True(t, ok)
	require.Equal(t, "team", cl.Name)
	_, ok = r.Set().Authenticate("k-shadow")
	require.False(t, ok, "a config name is the config's")
	cc, ok := r.ConfigClient("web")
	require.True(t, ok)
	require.Equal(t, webKey, cc.Key)
	_, ok = r.ConfigClient("team")
	require.False(t, ok, "a runtime client is no config client")

	// A reload that takes the runtime client's name shadows it.
	r.SetConfig(withDefaults([]Config{{Name: "team", Key: "ck-team-cfg", Role: RoleAdmin}}))
	require.Equal(t, applied{[]string{"team", "web"}, []string{"team", "web"}}, got[1], "web is no longer shadowed")
	_, ok = r.Set().Authenticate("k-team")
	require.False(t, ok)
	cl, ok = r.Set().Authenticate("k-shadow")
	require.True(t, ok, "web is a runtime client now")
	require.Equal(t, "web", cl.Name)

	// Without config clients the gateway is open and runtime clients wait.
	r.SetConfig(nil)
	require.Empty(t, got[2].admitted)
	require.Empty(t, got[2].names)
	require.True(t, r.Set().Open())
}

// TestConfigValidate: the clients' rules, each error naming the client's
// index and the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ups := map[string]bool{"claude": true}
	for _, tc := range []struct {
		name string
		cfgs []Config
		err  string
	}{
		{"ok", adminClients, ""},
		{"no name", []Config{{Key: "k"}}, "[0].name: required"},
		{"no key", []Config{{Name: "a"}}, "[0].key: required"},
		{"bad role", []Config{{Name: "a", Key: "k", Role: "root"}}, `[0].role: "root" is not admin or client`},
		{"bad digest", []Config{{Name: "a", KeySHA256: "xyz"}}, "[0].key_sha256:"},
		{"priorities", []Config{{Name: "a", Key: "k", DefaultPriority: "critical", MaxPriority: "high"}}, "[0].default_priority:"},
		{"unknown upstream", []Config{{Name: "a", Key: "k", Limits: admit.ClientLimits{Upstreams: map[string]admit.LimitValues{"nope": {}}}}}, "[0].limits.upstreams.nope:"},
		{"duplicate name", []Config{{Name: "a", Key: "k1"}, {Name: "a", Key: "k2"}}, `[1].name: duplicate client "a"`},
		{"duplicate key", []Config{{Name: "a", Key: "k"}, {Name: "b", KeySHA256: digest("k")}}, "[1].keys: a key is used twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Validate(withDefaults(tc.cfgs), ups)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func withDefaults(cfgs []Config) []Config {
	out := make([]Config, len(cfgs))
	for i, c := range cfgs {
		out[i] = c.WithDefaults()
	}
	return out
}
