package clientsapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

const (
	opsKey = "ck-ops-admin-key"
	webKey = "ck-web-client-key"
)

var adminClients = []clients.Config{
	{Name: "ops", Key: opsKey, Role: clients.RoleAdmin},
	{Name: "web", Key: webKey},
}

// rig is the API in front of a fresh SQLite store, its clients in a
// registry, polled on a fake clock (so only the API's own Load applies a
// change).
type rig struct {
	url string
	reg *clients.Registry
	mu  sync.Mutex
	// admitted are the names handed to the admission layer, last first.
	admitted [][]string
}

// lastAdmitted returns the names last handed to the admission layer.
func (g *rig) lastAdmitted() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitted[0]
}

func newRig(t *testing.T, cfgs []clients.Config) *rig {
	t.Helper()
	st, err := jobstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "clients.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	for i, c := range cfgs {
		cfgs[i] = c.WithDefaults()
	}
	g := &rig{}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	g.reg = clients.NewRegistry(cfgs, clk.Now, func(_ []admit.Client, names []string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.admitted = append([][]string{names}, g.admitted...)
	})
	p := clients.NewPoller(clients.PollerConfig{Store: st, Interval: time.Hour, Apply: g.reg.SetRuntime, Clock: clk})
	require.NoError(t, p.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, p.Stop(context.Background())) })
	api, err := New(Config{Registry: g.reg, Upstreams: []string{"claude"}, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		Authenticate: func(r *http.Request) (clients.Client, bool) {
			return g.reg.Set().Authenticate(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		},
		Running: func() (Store, *clients.Poller) { return st, p }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

func (g *rig) call(t *testing.T, method, path, key, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestClientsAPIAppliesAtOnce: a change is in force on the node that made
// it when the answer arrives (the API reloads the clients, it does not
// wait for the poll): a created key authenticates, the admission layer
// and the metrics' label see the client, a rotated-out key and a revoked
// client are refused.
func TestClientsAPIAppliesAtOnce(t *testing.T) {
	t.Parallel()
	g := newRig(t, adminClients)
	var created ClientInfo
	code, b := g.call(t, "POST", "/v1/clients", opsKey, `{"name":"team-a","role":"admin"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	require.NoError(t, json.Unmarshal(b, &created))
	require.True(t, strings.HasPrefix(created.Key, clients.KeyPrefix))
	cl, ok := g.reg.Set().Authenticate(created.Key)
	require.True(t, ok)
	require.Equal(t, "team-a", cl.Name)
	require.True(t, cl.Admin)
	require.Equal(t, []string{"ops", "web", "team-a"}, g.lastAdmitted())

	// The new admin may call the API with its own key.
	var rot ClientInfo
	code, b = g.call(t, "POST", "/v1/clients/team-a/rotate", created.Key, "")
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, json.Unmarshal(b, &rot))
	_, ok = g.reg.Set().Authenticate(created.Key)
	require.False(t, ok, "rotated out without a grace period")
	code, b = g.call(t, "DELETE", "/v1/clients/team-a", opsKey, "")
	require.Equal(t, http.StatusOK, code, string(b))
	_, ok = g.reg.Set().Authenticate(rot.Key)
	require.False(t, ok, "revoked")
	require.Equal(t, []string{"ops", "web"}, g.lastAdmitted())
}

// TestClientsAPIRefusals: who may call the API, and what it refuses,
// each with the status, the jobs API's error shape and a message that
// names the field.
func TestClientsAPIRefusals(t *testing.T) {
	t.Parallel()
	g := newRig(t, adminClients)
	code, b := g.call(t, "POST", "/v1/clients", opsKey, `{"name":"taken"}`)
	require.Equal(t, http.StatusCreated, code, string(b))

	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
		errType, msg                  string
	}{
		{"no key", "GET", "/v1/clients", "", "", 401, "authentication_error", "invalid or missing"},
		{"wrong key", "GET", "/v1/clients", "nope", "", 401, "authentication_error", "invalid or missing"},
		{"not an admin", "POST", "/v1/clients", webKey, `{"name":"x"}`, 403, "permission_error", "web is not an admin"},
		{"not an admin reads", "GET", "/v1/clients/taken", webKey, "", 403, "permission_error", "admin"},
		{"no name", "POST", "/v1/clients", opsKey, `{}`, 400, "invalid_request_error", "name:"},
		{"bad name", "POST", "/v1/clients", opsKey, `{"name":"a b"}`, 400, "invalid_request_error", "name:"},
		{"reserved name", "POST", "/v1/clients", opsKey, `{"name":"other"}`, 400, "invalid_request_error", "name:"},
		{"bad role", "POST", "/v1/clients", opsKey, `{"name":"x","role":"root"}`, 400, "invalid_request_error", "role:"},
		{"bad priority", "POST", "/v1/clients", opsKey, `{"name":"x","max_priority":"urgent"}`, 400, "invalid_request_error", "max_priority:"},
		{"negative limit", "POST", "/v1/clients", opsKey, `{"name":"x","limits":{"requests_per_minute":-1}}`, 400, "invalid_request_error", "limits.requests_per_minute:"},
		{"unknown upstream", "POST", "/v1/clients", opsKey, `{"name":"x","limits":{"upstreams":{"nope":{"max_concurrency":1}}}}`, 400, "invalid_request_error", "limits.upstreams.nope:"},
		{"bad budget", "POST", "/v1/clients", opsKey, `{"name":"x","budget":{"day":-5}}`, 400, "invalid_request_error", "budget.day:"},
		{"wrong type", "POST", "/v1/clients", opsKey, `{"name":"x","budget":{"day":"lots"}}`, 400, "invalid_request_error", "budget.day:"},
		{"unknown field", "POST", "/v1/clients", opsKey, `{"name":"x","colour":"red"}`, 400, "invalid_request_error", `"colour"`},
		{"past expiry", "POST", "/v1/clients", opsKey, `{"name":"x","expires_at":"2001-01-01T00:00:00Z"}`, 400, "invalid_request_error", "expires_at:"},
		{"bad expiry", "POST", "/v1/clients", opsKey, `{"name":"x","expires_at":"tomorrow"}`, 400, "invalid_request_error", "RFC 3339"},
		{"not JSON", "POST", "/v1/clients", opsKey, `{`, 400, "invalid_request_error", "not a valid request"},
		{"exists", "POST", "/v1/clients", opsKey, `{"name":"taken"}`, 409, "conflict_error", "exists"},
		{"config name created", "POST", "/v1/clients", opsKey, `{"name":"web"}`, 409, ErrorTypeConfigManaged, "config file"},
		{"config name changed", "PATCH", "/v1/clients/web", opsKey, `{"role":"admin"}`, 409, ErrorTypeConfigManaged, "config file"},
		{"config name rotated", "POST", "/v1/clients/ops/rotate", opsKey, ``, 409, ErrorTypeConfigManaged, "config file"},
		{"config name revoked", "DELETE", "/v1/clients/web", opsKey, ``, 409, ErrorTypeConfigManaged, "config file"},
		{"rename", "PATCH", "/v1/clients/taken", opsKey, `{"name":"other-name"}`, 400, "invalid_request_error", "name:"},
		{"bad patch", "PATCH", "/v1/clients/taken", opsKey, `{"role":"root"}`, 400, "invalid_request_error", "role:"},
		{"bad grace", "POST", "/v1/clients/taken/rotate", opsKey, `{"grace_seconds":-1}`, 400, "invalid_request_error", "grace_seconds:"},
		{"unknown client", "GET", "/v1/clients/nobody", opsKey, "", 404, "not_found_error", "nobody"},
		{"unknown patched", "PATCH", "/v1/clients/nobody", opsKey, `{"role":"admin"}`, 404, "not_found_error", "nobody"},
		{"unknown rotated", "POST", "/v1/clients/nobody/rotate", opsKey, "", 404, "not_found_error", "nobody"},
		{"unknown revoked", "DELETE", "/v1/clients/nobody", opsKey, "", 404, "not_found_error", "nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tc.method, g.url+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var e jobsapi.APIError
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, tc.status, resp.StatusCode, "%+v", e)
			require.Equal(t, tc.errType, e.Error.Type, e.Error.Message)
			require.Contains(t, e.Error.Message, tc.msg)
			if tc.status != 401 && tc.status != 403 {
				require.NotEmpty(t, resp.Header.Get("X-Sluice-Request-Id"))
			}
		})
	}
}

// FuzzClientRequest: any body of POST or PATCH /v1/clients is decoded,
// applied and validated without a panic, and one that passes makes a
// spec the gateway can store and read back.
func FuzzClientRequest(f *testing.F) {
	for _, s := range []string{`{"name":"a","limits":{"requests_per_minute":5,"upstreams":{"claude":{"max_concurrency":2}}},"budget":{"day":1}}`,
		`{"expires_at":null}`, `{"expires_at":"2030-01-01T00:00:00Z","role":"admin"}`, `{"budget":{"day":"x"}}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	ups := map[string]bool{"claude": true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req ClientRequest
		if err := decodeStrict(raw, &req); err != nil {
			require.ErrorIs(t, err, errClientRequest)
			return
		}
		sp := req.apply(clients.Spec{}).WithDefaults()
		if sp.Validate("fuzz", ups) != nil {
			return
		}
		b, err := json.Marshal(sp)
		require.NoError(t, err)
		rc, err := clients.Decode(&jobstore.StoredClient{Name: "fuzz", Spec: b})
		require.NoError(t, err)
		require.Equal(t, sp.Role, rc.Spec.Role)
	})
}
