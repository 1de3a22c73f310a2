package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookInbox is a webhook receiver on loopback: every POST's headers and
// body, by webhook-id.
type hookInbox struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string][]http.Header
	body map[string][]byte
}

func newHookInbox(t *testing.T) *hookInbox {
	h := &hookInbox{hits: map[string][]http.Header{}, body: map[string][]byte{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		h.mu.Lock()
		h.hits[id] = append(h.hits[id], r.Header.Clone())
		h.body[id] = b
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// events unwraps every event received with OpenAI's SDK (its signature
// checked with the gateway's secret), by batch id.
func (h *hookInbox) events(t *testing.T) map[string][]string {
	t.Helper()
	c := openai.NewClient(ooption.WithAPIKey("unused"), ooption.WithWebhookSecret(hookSecret))
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for id, hits := range h.hits {
		require.Len(t, hits, 1, "delivery %s POSTed %d times", id, len(hits))
		ev, err := c.Webhooks.Unwrap(h.body[id], hits[0])
		require.NoError(t, err, "OpenAI's SDK unwraps the event: %s", h.body[id])
		require.Equal(t, id, ev.ID)
		out[ev.Data.ID] = append(out[ev.Data.ID], ev.Type)
	}
	return out
}

// TestBatchWebhooksFromTheSDKs: the official SDKs' batch creates, unchanged
// but for what they already carry (OpenAI's metadata; a request header,
// which both SDKs set per request or per client), and POST /v1/batches
// with the header, name a completion webhook: each batch's end is POSTed
// once, signed, in the shape OpenAI's SDK unwraps, with the event that
// says how it ended. A URL the gateway may not call is refused at the
// create in the provider's error shape, and nothing is queued.
func TestBatchWebhooksFromTheSDKs(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Limits: mock.Limits{RPM: 100_000, ITPM: 100_000_000, OTPM: 10_000_000, TPM: 100_000_000},
		BurstSeconds: 60, OutputTokens: mock.OutputRange{Min: 3, Max: 8}, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	inbox := newHookInbox(t)
	up := func(name string, p llm.Protocol) upcfg.Config {
		return upcfg.Config{Name: name, Protocol: p, BaseURL: m.URL(), APIKey: "sk-" + name, Limits: upcfg.Limits{MaxConcurrency: 4}}
	}
	g, err := New(Config{Store: "sqlite:" + filepath.Join(t.TempDir(), "sluice.db"), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{up("anthropic", llm.Anthropic), up("openai", llm.OpenAI), up("held", llm.Anthropic)},
		Jobs:      jobs.Settings{WebhookSecret: hookSecret, Webhooks: jobs.Webhooks{Allow: []string{"127.0.0.1"}}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	ctx := t.Context()
	hook := inbox.srv.URL + "/batches?token=t"

	oa := openai.NewClient(ooption.WithBaseURL("http://"+g.Addr()+"/openai/v1"), ooption.WithAPIKey("k"), ooption.WithMaxRetries(0))
	in, err := oa.Files.New(ctx, openai.FileNewParams{File: bytes.NewReader(chatLines(3, "wh")), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	ob, err := oa.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{jobsapi.WebhookMetadataKey: hook}})
	require.NoError(t, err)
	bad, err := oa.Files.New(ctx, openai.FileNewParams{File: strings.NewReader("not json\n"), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	failed, err := oa.Batches.New(ctx, openai.BatchNewParams{InputFileID: bad.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, ooption.WithHeader(jobsapi.WebhookHeader, hook))
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusValidating, failed.Status, "the create answers validating, as OpenAI's")
	failed, err = oa.Batches.Get(ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusFailed, failed.Status, "the next read shows the file refused")
	_, err = oa.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{jobsapi.WebhookMetadataKey: "http://10.1.2.3/x"}})
	var oe *openai.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusBadRequest, oe.StatusCode)
	require.Contains(t, oe.Message, "metadata.sluice_webhook_url")

	ac := anthropic.NewClient(aoption.WithBaseURL("http://"+g.Addr()+"/anthropic"), aoption.WithAPIKey("k"), aoption.WithMaxRetries(0))
	ab, err := ac.Messages.Batches.New(ctx, batchRequests(3, "wh"), aoption.WithHeader(jobsapi.WebhookHeader, hook))
	require.NoError(t, err)
	_, err = ac.Messages.Batches.New(ctx, batchRequests(1, "nope"), aoption.WithHeader(jobsapi.WebhookHeader, "ftp://example.com/x"))
	var ae *anthropic.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadRequest, ae.StatusCode)

	post := func(path, body string, hdr ...string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.Addr()+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	native := func(upstream string) string {
		var lines strings.Builder
		for i := range 2 {
			fmt.Fprintf(&lines, `{"custom_id":"n%d","params":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}}`+"\n", i)
		}
		resp := post("/v1/batches?upstream="+upstream, lines.String(), jobsapi.WebhookHeader, hook)
		defer resp.Body.Close()
		v := readJSON[jobsapi.BatchView](t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, hook, v.WebhookURL)
		return v.ID
	}
	nb := native("anthropic")
	// A batch on a paused upstream, canceled before any of it runs.
	status := func(path, body string, hdr ...string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.Addr()+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status("/v1/upstreams/held/pause", ""))
	cb := native("held")
	require.Equal(t, http.StatusOK, status("/v1/batches/"+cb+"/cancel", ""))
	require.Equal(t, http.StatusBadRequest, status("/v1/batches?upstream=anthropic", `{"custom_id":"x","params":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}}`,
		jobsapi.WebhookHeader, "http://169.254.169.254/latest"))

	want := map[string][]string{ob.ID: {"batch.completed"}, failed.ID: {"batch.failed"}, ab.ID: {"batch.completed"},
		nb: {"batch.completed"}, cb: {"batch.cancelled"}}
	require.Eventually(t, func() bool {
		inbox.mu.Lock()
		defer inbox.mu.Unlock()
		return len(inbox.hits) >= len(want)
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, want, inbox.events(t))

	got, err := http.Get("http://" + g.Addr() + "/v1/batches/" + nb)
	require.NoError(t, err)
	v := readJSON[jobsapi.BatchView](t, got)
	require.NoError(t, got.Body.Close())
	require.Len(t, v.WebhookDeliveries, 1)
	require.Equal(t, "batch.completed", v.WebhookDeliveries[0].Event)
}

func readJSON[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}
