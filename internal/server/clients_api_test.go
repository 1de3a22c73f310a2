package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clientsapi"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	upcfg "github.com/sluicehq/sluice/upstream"
)

const (
	opsKey = "ck-ops-admin-key"
	webKey = "ck-web-client-key"
)

var adminClients = []clients.Config{
	{Name: "ops", Key: opsKey, Role: clients.RoleAdmin},
	{Name: "web", Key: webKey},
}

// clientsGateway starts a gateway in front of m on store with the admin
// clients, polling the runtime clients every poll.
func clientsGateway(t *testing.T, m *mock.Server, store string, poll time.Duration, node string, log ...*syncBuffer) *Server {
	t.Helper()
	lg := discardLogger()
	if len(log) > 0 {
		lg = slog.New(slog.NewJSONHandler(log[0], nil))
	}
	g, err := New(Config{Store: store, Listen: "127.0.0.1:0", Clients: adminClients, ClientsPoll: poll, Cluster: admit.ClusterConfig{NodeID: node},
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}}},
		WithLogger(lg))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	return g
}

const clientsMessage = `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

// adminCall sends a /v1/clients request with key and decodes a 2xx answer
// into out.
func adminCall(t *testing.T, g *Server, method, path, key, body string, out any) (int, []byte) {
	t.Helper()
	code, b := call(t, method, "http://"+g.Addr()+path, key, body)
	if out != nil && code/100 == 2 {
		require.NoError(t, json.Unmarshal(b, out), "body: %s", b)
	}
	return code, b
}

func proxied(t *testing.T, g *Server, key string) (int, []byte) {
	t.Helper()
	return call(t, "POST", "http://"+g.Addr()+"/claude/v1/messages", key, clientsMessage)
}

// apiErrorType reads a jobs-API error's type.
func apiErrorType(t *testing.T, b []byte) (string, string) {
	t.Helper()
	var e jobsapi.APIError
	require.NoError(t, json.Unmarshal(b, &e), "body: %s", b)
	require.Equal(t, "error", e.Type, "body: %s", b)
	return e.Error.Type, e.Error.Message
}

// TestClientsAPIEndToEnd: an admin creates a client over HTTP, its key
// works on a proxied request to the mock; a rotation with a grace period
// keeps both keys, one without it refuses the old key with a 401 in
// Anthropic's shape; a revocation refuses the new one. The key is
// answered once and never listed, every action is logged with the
// admin's name and counted.
func TestClientsAPIEndToEnd(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	var logs syncBuffer
	g := clientsGateway(t, m, testStore(t), time.Hour, "", &logs)

	var created clientsapi.ClientInfo
	code, b := adminCall(t, g, "POST", "/v1/clients", opsKey,
		`{"name":"team-a","limits":{"requests_per_minute":600},"budget":{"day":5}}`, &created)
	require.Equal(t, http.StatusCreated, code, string(b))
	require.True(t, strings.HasPrefix(created.Key, clients.KeyPrefix), created.Key)
	require.Equal(t, clientsapi.ClientSourceAPI, created.Source)
	require.Equal(t, clients.RoleClient, created.Role)
	require.Equal(t, "normal", created.DefaultPriority)
	require.InDelta(t, 5.0, created.Budget.Day, 0)
	require.Len(t, created.Keys, 1)
	require.Equal(t, created.Key[:len(clients.KeyPrefix)+4], created.Keys[0].Prefix)
	key1 := created.Key

	code, b = proxied(t, g, key1)
	require.Equal(t, http.StatusOK, code, string(b))

	// Listed with the config's clients, never with a key.
	var list clientsapi.ClientList
	code, b = adminCall(t, g, "GET", "/v1/clients", opsKey, "", &list)
	require.Equal(t, http.StatusOK, code, string(b))
	require.NotContains(t, string(b), key1)
	require.NotContains(t, string(b), opsKey)
	require.NotContains(t, string(b), `"key"`)
	var names, sources []string
	for _, c := range list.Data {
		names, sources = append(names, c.Name), append(sources, c.Source)
	}
	require.Equal(t, []string{"ops", "web", "team-a"}, names)
	require.Equal(t, []string{"config", "config", "api"}, sources)
	var got clientsapi.ClientInfo
	code, b = adminCall(t, g, "GET", "/v1/clients/team-a", opsKey, "", &got)
	require.Equal(t, http.StatusOK, code, string(b))
	require.Empty(t, got.Key)
	require.InDelta(t, 600.0, got.Limits.RequestsPerMinute, 0)

	// A change of budget and role applies at once.
	code, b = adminCall(t, g, "PATCH", "/v1/clients/team-a", opsKey, `{"budget":{"day":7},"max_priority":"high"}`, &got)
	require.Equal(t, http.StatusOK, code, string(b))
	require.InDelta(t, 7.0, got.Budget.Day, 0)
	require.Equal(t, "high", got.MaxPriority)
	require.InDelta(t, 600.0, got.Limits.RequestsPerMinute, 0, "a field not given is kept")
	require.Greater(t, got.Version, created.Version)
	var st opsview.StatusResponse
	code, b = call(t, "GET", "http://"+g.Addr()+"/v1/status", opsKey, "")
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, json.Unmarshal(b, &st))
	sp := clientSpend(t, st, "team-a")
	require.NotNil(t, sp.Day.LimitUSD)
	require.InDelta(t, 7.0, *sp.Day.LimitUSD, 0)
	require.NotNil(t, sp.Day.RemainingUSD, "the remaining budget")
	// The client itself sees its own spend, and no one else's.
	code, b = call(t, "GET", "http://"+g.Addr()+"/v1/status", key1, "")
	require.Equal(t, http.StatusOK, code, string(b))
	var own opsview.StatusResponse
	require.NoError(t, json.Unmarshal(b, &own))
	require.Len(t, own.Spend.Clients, 1)
	require.Equal(t, "team-a", own.Spend.Clients[0].Client)

	// Rotate with a grace period: both keys work.
	var rot clientsapi.ClientInfo
	code, b = adminCall(t, g, "POST", "/v1/clients/team-a/rotate", opsKey, `{"grace_seconds":3600}`, &rot)
	require.Equal(t, http.StatusOK, code, string(b))
	key2 := rot.Key
	require.NotEqual(t, key1, key2)
	require.Len(t, rot.Keys, 2)
	require.NotNil(t, rot.Keys[1].ExpiresAt)
	for _, k := range []string{key1, key2} {
		code, b = proxied(t, g, k)
		require.Equal(t, http.StatusOK, code, string(b))
	}
	// Rotate without one: only the newest key works.
	code, b = adminCall(t, g, "POST", "/v1/clients/team-a/rotate", opsKey, "", &rot)
	require.Equal(t, http.StatusOK, code, string(b))
	key3 := rot.Key
	require.Len(t, rot.Keys, 1)
	for _, k := range []string{key1, key2} {
		code, b = proxied(t, g, k)
		require.Equal(t, http.StatusUnauthorized, code, string(b))
		requireProviderError(t, llm.Anthropic, b, "authentication_error")
	}
	code, b = proxied(t, g, key3)
	require.Equal(t, http.StatusOK, code, string(b))

	// Revoked: refused with a 401 in the provider's shape.
	var rev clientsapi.ClientRevoked
	code, b = adminCall(t, g, "DELETE", "/v1/clients/team-a", opsKey, "", &rev)
	require.Equal(t, http.StatusOK, code, string(b))
	require.True(t, rev.Revoked)
	code, b = proxied(t, g, key3)
	require.Equal(t, http.StatusUnauthorized, code, string(b))
	requireProviderError(t, llm.Anthropic, b, "authentication_error")
	code, b = adminCall(t, g, "GET", "/v1/clients/team-a", opsKey, "", nil)
	require.Equal(t, http.StatusNotFound, code, string(b))

	// Logged with who did what to whom, and counted.
	for _, action := range []string{"create", "update", "rotate", "revoke"} {
		require.Contains(t, logs.String(), `"msg":"client admin action","admin":"ops","action":"`+action+`","client":"team-a"`)
	}
	require.NotContains(t, logs.String(), key1)
	_, metrics := call(t, "GET", "http://"+g.Addr()+"/metrics", opsKey, "")
	require.Contains(t, string(metrics), `sluice_client_admin_actions_total{action="rotate",result="ok"} 2`)
	require.Contains(t, string(metrics), `sluice_client_admin_actions_total{action="create",result="ok"} 1`)
}

// TestClientsAPIWithoutStoreOrConfigClients: the API needs the job store
// (where clients are kept) and clients in the config (else the gateway is
// open to every caller and a runtime client would lock it).
func TestClientsAPIWithoutStoreOrConfigClients(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, adminClients, func(c *Config) { c.Store = StoreNone })
	r, b := ts.do(t, "GET", "/v1/clients", "", map[string]string{"x-api-key": opsKey})
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, string(b))
	typ, msg := apiErrorType(t, b)
	require.Equal(t, "unavailable_error", typ)
	require.Contains(t, msg, "store")

	open := newTestServer(t, nil)
	r, b = open.do(t, "POST", "/v1/clients", `{"name":"x"}`, nil)
	require.Equal(t, http.StatusForbidden, r.StatusCode, string(b))
	_, msg = apiErrorType(t, b)
	require.Contains(t, msg, "clients in the config")
}

// TestClientsReachEveryNode: two gateways on one PostgreSQL store; a
// client created on one is accepted by the other within its poll; a
// rotation on the first (with a grace period) makes the other accept the
// new key and, once the grace is over and not before, refuse the old one;
// and a revocation on the other is refused by the first.
func TestClientsReachEveryNode(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	m := startSpendMock(t)
	a := clientsGateway(t, m, dsn, 50*time.Millisecond, "node-a")
	b := clientsGateway(t, m, dsn, 50*time.Millisecond, "node-b")

	var created clientsapi.ClientInfo
	var code int
	var body []byte
	// The PostgreSQL store connects in the background: until it has, the
	// admin API answers 503 with Retry-After, and the caller tries again.
	require.Eventually(t, func() bool {
		code, body = adminCall(t, a, "POST", "/v1/clients", opsKey, `{"name":"shared"}`, &created)
		return code != http.StatusServiceUnavailable
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusCreated, code, string(body))
	require.Eventually(t, func() bool {
		code, _ := proxied(t, b, created.Key)
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "node b never accepted the client created on node a")

	// Rotate on a, the old key kept for a grace period.
	const grace = 2 * time.Second
	var rotated clientsapi.ClientInfo
	rotatedAt := time.Now()
	code, body = adminCall(t, a, "POST", "/v1/clients/shared/rotate", opsKey, fmt.Sprintf(`{"grace_seconds":%g}`, grace.Seconds()), &rotated)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotEqual(t, created.Key, rotated.Key)
	require.Eventually(t, func() bool {
		code, _ := proxied(t, b, rotated.Key)
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "node b never accepted the key rotated on node a")
	var refusedAt time.Time
	require.Eventually(t, func() bool {
		code, answer := proxied(t, b, created.Key)
		if code == http.StatusOK {
			return false
		}
		refusedAt = time.Now()
		require.Equal(t, http.StatusUnauthorized, code, string(answer))
		requireProviderError(t, llm.Anthropic, answer, "authentication_error")
		return true
	}, 30*time.Second, 20*time.Millisecond, "node b kept accepting the key rotated away on node a")
	require.GreaterOrEqual(t, refusedAt.Sub(rotatedAt), grace, "node b refused the old key before its grace was over")
	t.Logf("rotation on a: b accepted the new key, and refused the old one %v after the rotation (grace %v)",
		refusedAt.Sub(rotatedAt).Round(time.Millisecond), grace)
	code, _ = proxied(t, b, rotated.Key)
	require.Equal(t, http.StatusOK, code, "the new key outlives the grace")

	code, body = adminCall(t, b, "DELETE", "/v1/clients/shared", opsKey, "", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Eventually(t, func() bool {
		code, _ := proxied(t, a, rotated.Key)
		return code == http.StatusUnauthorized
	}, 30*time.Second, 20*time.Millisecond, "node a kept accepting a client revoked on node b")
}
