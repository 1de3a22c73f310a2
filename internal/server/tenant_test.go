package server

import (
	"context"
	"encoding/json"
	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/opsview"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

const tenantJobBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`

// startTenantGateway runs the gateway with a store, two upstreams on one
// mock, and clients alice and bob (role client) and root (role admin).
func startTenantGateway(t *testing.T) string {
	t.Helper()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"},
			{Name: "claude2", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up2"}},
		Clients: []clients.Config{{Name: "alice", Key: "ck-alice"}, {Name: "bob", Key: "ck-bob"},
			{Name: "root", Key: "ck-root", Role: clients.RoleAdmin}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	return "http://" + g.Addr()
}

// TestCrossClientMatrix calls every jobs and batches route on alice's job
// and batch as alice (owner), bob (another client) and root (admin): the
// owner and the admin reach them, bob gets the 404 an unknown id gets (in
// the API's error shape), and the routes that cross clients are admin
// only (403).
func TestCrossClientMatrix(t *testing.T) {
	t.Parallel()
	base := startTenantGateway(t)
	code, body := call(t, "POST", base+"/v1/jobs", "ck-alice", `{"upstream":"claude","idempotency_key":"k","request":`+tenantJobBody+`}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var job struct {
		ID     json.Number `json:"id"`
		State  string      `json:"state"`
		Client string      `json:"client"`
	}
	require.NoError(t, json.Unmarshal(body, &job))
	jid := job.ID.String()
	code, body = call(t, "GET", base+"/v1/jobs/"+jid+"?wait=20s", "ck-alice", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &job))
	require.Equal(t, "succeeded", job.State)
	require.Equal(t, "alice", job.Client)

	line := `{"custom_id":"a","params":` + tenantJobBody + `}`
	code, body = call(t, "POST", base+"/v1/batches?upstream=claude", "ck-alice", line)
	require.Equal(t, http.StatusOK, code, string(body))
	var batch struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &batch))
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/batches/"+batch.ID, "ck-alice", "")
		return strings.Contains(string(b), `"ended"`)
	}, 30e9, 50e6)

	const owner, other, admin = "ck-alice", "ck-bob", "ck-root"
	type cell struct{ owner, other, admin int }
	for _, tc := range []struct {
		name, method, path, body string
		want                     cell
	}{
		{"read", "GET", "/v1/jobs/" + jid, "", cell{200, 404, 200}},
		{"wait", "GET", "/v1/jobs/" + jid + "?wait=1s", "", cell{200, 404, 200}},
		{"cancel", "POST", "/v1/jobs/" + jid + "/cancel", "", cell{409, 404, 409}},
		{"delete", "DELETE", "/v1/jobs/" + jid, "", cell{409, 404, 409}},
		{"retry", "POST", "/v1/jobs/" + jid + "/retry", "", cell{409, 404, 409}},
		{"redeliver", "POST", "/v1/jobs/" + jid + "/webhook/redeliver", "", cell{409, 404, 409}},
		{"retry ids", "POST", "/v1/jobs/retry", `{"ids":[` + jid + `]}`, cell{409, 404, 409}},
		{"retry many ids", "POST", "/v1/jobs/retry", `{"ids":[` + jid + `,999999]}`, cell{200, 200, 200}},
		{"retry batch", "POST", "/v1/jobs/retry", `{"batch_id":"` + batch.ID + `"}`, cell{200, 200, 200}},
		{"retry all", "POST", "/v1/jobs/retry", `{"all":true}`, cell{403, 403, 200}},
		{"retry upstream", "POST", "/v1/jobs/retry", `{"upstream":"claude"}`, cell{403, 403, 200}},
		{"list", "GET", "/v1/jobs", "", cell{200, 200, 200}},
		{"batch list", "GET", "/v1/batches", "", cell{200, 200, 200}},
		{"batch read", "GET", "/v1/batches/" + batch.ID, "", cell{200, 404, 200}},
		{"batch results", "GET", "/v1/batches/" + batch.ID + "/results", "", cell{200, 404, 200}},
		{"batch cancel", "POST", "/v1/batches/" + batch.ID + "/cancel", "", cell{200, 404, 200}},
		{"pause", "POST", "/v1/upstreams/claude2/pause", "", cell{403, 403, 200}},
		{"resume", "POST", "/v1/upstreams/claude2/resume", "", cell{403, 403, 200}},
		{"paused", "GET", "/v1/upstreams/paused", "", cell{200, 200, 200}},
	} {
		for _, who := range []struct {
			key  string
			want int
		}{{owner, tc.want.owner}, {other, tc.want.other}, {admin, tc.want.admin}} {
			code, body := call(t, tc.method, base+tc.path, who.key, tc.body)
			require.Equal(t, who.want, code, "%s as %s: %s", tc.name, who.key, body)
			switch code {
			case 404:
				requireAPIError(t, body, "not_found_error")
				require.NotContains(t, string(body), "alice", "a 404 names no owner")
			case 403:
				requireAPIError(t, body, "permission_error")
			}
		}
	}
	// bob's 404 is the 404 of an id that does not exist.
	_, theirs := call(t, "GET", base+"/v1/jobs/"+jid, other, "")
	_, none := call(t, "GET", base+"/v1/jobs/999999", other, "")
	// (Their request ids differ; the rest is the same.)
	reqID := regexp.MustCompile(`req_sluice_[0-9a-f]+`)
	require.Equal(t, reqID.ReplaceAllString(strings.ReplaceAll(string(none), "999999", jid), "ID"), reqID.ReplaceAllString(string(theirs), "ID"))

	// Lists: alice's job is in alice's and root's lists, never in bob's,
	// even when bob asks for alice's.
	for _, tc := range []struct {
		key, query string
		has        bool
	}{{owner, "", true}, {admin, "", true}, {admin, "?client=alice", true}, {other, "", false}, {other, "?client=alice", false}} {
		code, body := call(t, "GET", base+"/v1/jobs"+tc.query, tc.key, "")
		require.Equal(t, 200, code)
		var list struct {
			Data []struct {
				ID json.Number `json:"id"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &list))
		found := false
		for _, j := range list.Data {
			found = found || j.ID.String() == jid
		}
		require.Equal(t, tc.has, found, "list%s as %s", tc.query, tc.key)

		// The same for batches.
		code, body = call(t, "GET", base+"/v1/batches"+tc.query, tc.key, "")
		require.Equal(t, 200, code)
		var batches struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &batches))
		found = false
		for _, b := range batches.Data {
			found = found || b.ID == batch.ID
		}
		require.Equal(t, tc.has, found, "batch list%s as %s", tc.query, tc.key)
	}
	code, body = call(t, "GET", base+"/v1/batches?limit=0", owner, "")
	require.Equal(t, http.StatusBadRequest, code, string(body))

	// Idempotency keys are per client; a reused key must carry the same
	// request to the same upstream.
	submit := func(key, upstream, body string) (int, string, []byte) {
		code, b := call(t, "POST", base+"/v1/jobs", key, `{"upstream":"`+upstream+`","idempotency_key":"k","request":`+body+`}`)
		var j struct {
			ID json.Number `json:"id"`
		}
		_ = json.Unmarshal(b, &j)
		return code, j.ID.String(), b
	}
	code, id, _ := submit(owner, "claude", tenantJobBody)
	require.Equal(t, http.StatusOK, code, "the owner's repeat is the same job")
	require.Equal(t, jid, id)
	code, id, _ = submit(other, "claude", tenantJobBody)
	require.Equal(t, http.StatusAccepted, code, "another client's key is its own")
	require.NotEqual(t, jid, id)
	code, id, _ = submit(admin, "claude", tenantJobBody)
	require.Equal(t, http.StatusAccepted, code, "the admin's key is its own too")
	require.NotEqual(t, jid, id)
	code, _, b := submit(owner, "claude", strings.Replace(tenantJobBody, "hello", "bye", 1))
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Contains(t, requireAPIError(t, b, "conflict_error"), `idempotency key "k"`)
	code, _, b = submit(owner, "claude2", tenantJobBody)
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Contains(t, requireAPIError(t, b, "conflict_error"), `idempotency key "k"`)
}

// requireAPIError checks the jobs API's error envelope and returns its
// message.
func requireAPIError(t *testing.T, body []byte, typ string) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Equal(t, "error", e.Type)
	require.Equal(t, typ, e.Error.Type, string(body))
	return e.Error.Message
}

// TestOpenModeEveryCallerIsAdmin: with no clients configured, behaviour is
// as before ownership: any caller reads any job and pauses upstreams.
func TestOpenModeEveryCallerIsAdmin(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: "http://127.0.0.1:1", APIKey: "sk-up"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	code, body := call(t, "POST", base+"/v1/upstreams/claude/pause", "", "")
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/v1/jobs", "key-one", `{"upstream":"claude","request":`+tenantJobBody+`}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var j struct {
		ID json.Number `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &j))
	code, body = call(t, "GET", base+"/v1/jobs/"+j.ID.String(), "key-two", "")
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/v1/jobs/retry", "", `{"all":true}`)
	require.Equal(t, http.StatusOK, code, string(body))
}

// TestWebhookSSRFRefused: a webhook_url on a metadata address, or on a
// name that resolves to loopback, is refused at submit (400) unless the
// config allows it; metadata stays refused even then.
func TestWebhookSSRFRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		allow []string
		url   string
		want  int
	}{
		{"metadata", nil, "http://169.254.169.254/latest/meta-data/", http.StatusBadRequest},
		{"metadata allowed anyway?", []string{"169.254.0.0/16"}, "http://169.254.169.254/", http.StatusBadRequest},
		{"name resolving to loopback", nil, "http://localhost:9/hook", http.StatusBadRequest},
		{"loopback IP", nil, "http://127.0.0.1:9/hook", http.StatusBadRequest},
		{"loopback allowed", []string{"127.0.0.0/8"}, "http://localhost:9/hook", http.StatusAccepted},
		{"private", nil, "http://10.0.0.1/hook", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
				Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, APIKey: "sk-up"}},
				Jobs:      jobs.Settings{Webhooks: jobs.Webhooks{Allow: tc.allow}}},
				withEngine("claude", &fakeEngine{}), WithLogger(discardLogger()))
			require.NoError(t, err)
			require.NoError(t, g.Start(t.Context()))
			t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
			code, body := call(t, "POST", "http://"+g.Addr()+"/v1/jobs", "", `{"upstream":"claude","webhook_url":"`+tc.url+`","request":`+tenantJobBody+`}`)
			require.Equal(t, tc.want, code, string(body))
			if code == http.StatusBadRequest {
				require.Contains(t, requireAPIError(t, body, "invalid_request_error"), "webhook destination not allowed")
			}
		})
	}
}

// TestStatusPerClientDetailsAdminOnly: /v1/status shows each client's
// limits and room to an admin, and leaves them out for a client.
func TestStatusPerClientDetailsAdminOnly(t *testing.T) {
	t.Parallel()
	limited := admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 600, MaxConcurrency: 4}}
	ts := newTestServer(t, []clients.Config{{Name: "alice", Key: "ck-alice", Limits: limited}, {Name: "root", Key: "ck-root", Role: clients.RoleAdmin}})
	r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "ck-alice"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))
	_, body = ts.do(t, "GET", "/v1/status", "", map[string]string{"x-api-key": "ck-root"})
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.Len(t, st.ClientLimits, 1)
	require.Equal(t, "alice", st.ClientLimits[0].Client)
	require.Equal(t, "a", st.ClientLimits[0].Upstream)
	require.InDelta(t, 600, st.ClientLimits[0].Buckets["requests"].LimitPerMinute, 0.001)
	_, body = ts.do(t, "GET", "/v1/status", "", map[string]string{"x-api-key": "ck-alice"})
	require.NotContains(t, string(body), "client_limits")
	require.NotContains(t, string(body), "root", "no other client's name")
	var own opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &own))
	require.Nil(t, own.Clients)
	for _, c := range own.Spend.Clients {
		require.Equal(t, "alice", c.Client, "a client sees its own spend only")
	}
}
