package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clientsapi"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestClientAccessOnEveryDoor: a client's allowed_upstreams and
// allowed_models (internal/admit, one rule) refuse a request outside them
// on every door with 403 permission_error naming what it may use: live
// requests in the provider's shape (Anthropic and OpenAI), a
// pass-through, POST /v1/jobs and /v1/batches in the jobs API's shape,
// and the providers' own batch APIs in theirs; nothing is queued or sent.
// A runtime client's lists are set and widened through /v1/clients.
func TestClientAccessOnEveryDoor(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 5})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Clients: []clients.Config{{Name: "ops", Key: opsKey, Role: clients.RoleAdmin},
			{Name: "haiku", Key: "ck-haiku", Access: admit.Access{Upstreams: []string{"claude"}, Models: []string{"claude-haiku-*"}}}},
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"},
			{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	const (
		haiku  = `{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		sonnet = `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		gpt    = `{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	)
	modelRefused := `client haiku may not use model "claude-sonnet-4-5": it may use the models claude-haiku-* only`
	upstreamRefused := "client haiku may not use upstream gpt: it may use claude only"

	// Live requests, in the provider's shape.
	code, body := call(t, "POST", base+"/claude/v1/messages", "ck-haiku", haiku)
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/claude/v1/messages", "ck-haiku", sonnet)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "permission_error"), modelRefused)
	code, body = call(t, "POST", base+"/gpt/v1/chat/completions", "ck-haiku", gpt)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.OpenAI, body, "permission_error"), upstreamRefused)
	// A pass-through of an upstream it may not use.
	code, body = call(t, "GET", base+"/gpt/v1/models", "ck-haiku", "")
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.OpenAI, body, "permission_error"), upstreamRefused)
	// The admin, without lists, may use both.
	code, body = call(t, "POST", base+"/gpt/v1/chat/completions", opsKey, gpt)
	require.Equal(t, http.StatusOK, code, string(body))

	// The jobs API: refused at submit, in its own shape.
	code, body = call(t, "POST", base+"/v1/jobs", "ck-haiku", `{"upstream":"claude","request":`+sonnet+`}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	typ, msg := apiErrorType(t, body)
	require.Equal(t, "permission_error", typ)
	require.Contains(t, msg, modelRefused)
	code, body = call(t, "POST", base+"/v1/jobs", "ck-haiku", `{"upstream":"gpt","request":`+gpt+`}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	_, msg = apiErrorType(t, body)
	require.Contains(t, msg, upstreamRefused)
	code, body = call(t, "POST", base+"/v1/jobs", "ck-haiku", `{"upstream":"claude","request":`+haiku+`}`)
	require.Equal(t, http.StatusAccepted, code, string(body))

	// Sluice's batches: one line outside the lists refuses the batch,
	// even with skip_invalid (a permission is not a malformed line).
	lines := `{"custom_id":"a","params":` + haiku + "}\n" + `{"custom_id":"b","params":` + sonnet + "}\n"
	code, body = call(t, "POST", base+"/v1/batches?upstream=claude&skip_invalid=true", "ck-haiku", lines)
	require.Equal(t, http.StatusForbidden, code, string(body))
	typ, msg = apiErrorType(t, body)
	require.Equal(t, "permission_error", typ)
	require.Contains(t, msg, "line 2: "+modelRefused)
	require.Contains(t, msg, "nothing was queued")
	code, body = call(t, "POST", base+"/v1/batches?upstream=gpt", "ck-haiku", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":`+gpt+"}\n")
	require.Equal(t, http.StatusForbidden, code, string(body))
	_, msg = apiErrorType(t, body)
	require.Contains(t, msg, upstreamRefused)

	// Anthropic's Message Batches, in Anthropic's shape.
	code, body = call(t, "POST", base+"/claude/v1/messages/batches", "ck-haiku",
		`{"requests":[{"custom_id":"a","params":`+haiku+`},{"custom_id":"b","params":`+sonnet+`},{"custom_id":"c","params":`+sonnet+`}]}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	msg = requireProviderError(t, llm.Anthropic, body, "permission_error")
	require.Contains(t, msg, "requests.1 (and 1 more requests of the batch): "+modelRefused)

	// OpenAI's Batch API: the upstream itself is refused, before the upload.
	o := openAIHTTP{t, base + "/gpt", "ck-haiku"}
	code, body = o.do(http.MethodGet, "/v1/batches", "", nil)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.OpenAI, body, "permission_error"), upstreamRefused)

	// Nothing refused was queued: the one job accepted is haiku's only.
	code, body = call(t, "GET", base+"/v1/jobs?limit=100", "ck-haiku", "")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Data []struct{ Upstream string } `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Data, 1)

	// A runtime client: its lists through the admin API, refused, then
	// widened with PATCH.
	var created clientsapi.ClientInfo
	code, body = adminCall(t, g, "POST", "/v1/clients", opsKey, `{"name":"team","allowed_upstreams":["gpt"],"allowed_models":["gpt-4o*"]}`, &created)
	require.Equal(t, http.StatusCreated, code, string(body))
	require.Equal(t, []string{"gpt"}, created.Upstreams)
	require.Equal(t, []string{"gpt-4o*"}, created.Models)
	code, body = call(t, "POST", base+"/gpt/v1/chat/completions", created.Key, gpt)
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/claude/v1/messages", created.Key, haiku)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "permission_error"), "client team may not use upstream claude: it may use gpt only")
	code, body = adminCall(t, g, "PATCH", "/v1/clients/team", opsKey, `{"allowed_upstreams":[]}`, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/claude/v1/messages", created.Key, haiku)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "permission_error"), `may not use model "claude-haiku-4-5": it may use the models gpt-4o* only`)
	// Bad lists are refused naming the field.
	code, body = adminCall(t, g, "PATCH", "/v1/clients/team", opsKey, `{"allowed_upstreams":["nope"]}`, nil)
	require.Equal(t, http.StatusBadRequest, code, string(body))
	_, msg = apiErrorType(t, body)
	require.True(t, strings.HasPrefix(msg, `invalid request: allowed_upstreams[0]: no upstream is named "nope"`), msg)
}
