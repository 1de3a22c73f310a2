package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/pricing"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// Issue 25: the Responses API and embeddings go through the engine like
// chat completions, on every door.

// requireSluiceHeaders checks the headers the engine sets on an answer it
// scheduled (a pass-through answer has no upstream or key header).
func requireSluiceHeaders(t *testing.T, h http.Header) {
	t.Helper()
	require.NotEmpty(t, h.Get(frontdoor.HeaderUpstream), "x-sluice-upstream: %v", h)
	require.NotEmpty(t, h.Get(frontdoor.HeaderKey), "x-sluice-key")
	require.NotEmpty(t, h.Get(frontdoor.HeaderRequestID), "x-sluice-request-id")
	require.NotEmpty(t, h.Get("X-Sluice-Attempts"), "x-sluice-attempts")
	require.NotEmpty(t, h.Get("X-Sluice-Queue-Ms"), "x-sluice-queue-ms")
}

func TestSDKResponsesAndEmbeddingsThroughGateway(t *testing.T) {
	t.Parallel()
	f := startGateway(t, mock.Limits{RPM: 6000, TPM: 1_000_000}, 60, mock.Faults{})
	ctx := t.Context()
	c := f.openai()

	var raw *http.Response
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", MaxOutputTokens: openai.Int(32),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there")},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, r.Status)
	require.Positive(t, r.Usage.OutputTokens)
	require.Equal(t, r.Usage.OutputTokens, int64(len(strings.Fields(r.OutputText()))))
	require.Equal(t, "openai", raw.Header.Get(frontdoor.HeaderUpstream))
	requireSluiceHeaders(t, raw.Header)

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", MaxOutputTokens: openai.Int(32),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream to me")},
	}, ooption.WithResponseInto(&raw))
	var text strings.Builder
	var completed responses.Response
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, "response.created", types[0])
	require.Equal(t, "response.completed", types[len(types)-1])
	require.Positive(t, completed.Usage.OutputTokens)
	require.Equal(t, completed.Usage.OutputTokens, int64(len(strings.Fields(text.String()))))
	requireSluiceHeaders(t, raw.Header)

	e, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Small,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text", "the second text"}},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Len(t, e.Data, 2)
	require.Equal(t, int64(7), e.Usage.PromptTokens)
	requireSluiceHeaders(t, raw.Header)

	// A bad Responses body is the gateway's own 400 and never reaches the
	// provider.
	before := f.mock.Stats().Overall.ByStatus["400"]
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(3),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Contains(t, apiErr.Message, "max_output_tokens")
	require.Equal(t, before, f.mock.Stats().Overall.ByStatus["400"])

	// Counted per endpoint.
	code, body := call(t, "GET", "http://"+f.gateway.Addr()+"/metrics", "", "")
	require.Equal(t, http.StatusOK, code)
	for _, ep := range []string{"responses", "embeddings"} {
		require.Contains(t, string(body), `endpoint="`+ep+`",outcome="success"`)
	}
}

// TestResponsesReachTheKeyThatCreatedThem: on a pool of two keys (two
// projects to the mock: a response is found only with the key that
// created it), every response created through the gateway is then read,
// continued, listed, cancelled and deleted through it.
func TestResponsesReachTheKeyThatCreatedThem(t *testing.T) {
	t.Parallel()
	f := startGateway(t, mock.Limits{RPM: 6000, TPM: 1_000_000}, 60, mock.Faults{}, func(u *upcfg.Config) {
		u.APIKey = ""
		u.APIKeys = []upcfg.Key{{Key: "sk-project-a"}, {Key: "sk-project-b"}}
		u.Limits.MaxConcurrency = 1 // a key busy with one create sends the next to the other
	})
	ctx := t.Context()
	c := f.openai()
	// Created at once, so the pool places them on both keys (a key with a
	// create in flight has no free slot; one whose create has ended has
	// less room left than the other).
	keys := map[string]bool{}
	ids := make([]string, 8)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			var raw *http.Response
			params := responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(16),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("question %d", i))}}
			if i%2 == 1 {
				params.Background = openai.Bool(true)
			}
			var id string
			if i%4 == 2 {
				s := c.Responses.NewStreaming(ctx, params, ooption.WithResponseInto(&raw))
				for s.Next() {
					if ev := s.Current(); ev.Type == "response.created" {
						id = ev.AsResponseCreated().Response.ID
					}
				}
				assert.NoError(t, s.Err())
				assert.NoError(t, s.Close())
			} else {
				r, err := c.Responses.New(ctx, params, ooption.WithResponseInto(&raw))
				if !assert.NoError(t, err) {
					return
				}
				id = r.ID
			}
			assert.NotEmpty(t, id)
			mu.Lock()
			defer mu.Unlock()
			keys[raw.Header.Get(frontdoor.HeaderKey)] = true
			ids[i] = id
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.Len(t, keys, 2, "both keys of the pool created responses")
	for i, id := range ids {
		got, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{})
		require.NoError(t, err, "GET %s", id)
		require.Equal(t, id, got.ID)
		items, err := c.Responses.InputItems.List(ctx, id, responses.InputItemListParams{})
		require.NoError(t, err, "input_items %s", id)
		require.Len(t, items.Data, 1)
		// Counting the next turn goes to the key that holds this one, as
		// the create does.
		count, err := c.Responses.InputTokens.Count(ctx, responses.InputTokenCountParams{Model: openai.String("gpt-4.1"),
			PreviousResponseID: openai.String(got.ID),
			Input:              responses.InputTokenCountParamsInputUnion{OfString: openai.String("and then?")}})
		require.NoError(t, err, "counting after %s", id)
		next, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(16),
			PreviousResponseID: openai.String(got.ID),
			Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")}})
		require.NoError(t, err, "continuing %s", id)
		require.Greater(t, next.Usage.InputTokens, got.Usage.InputTokens)
		require.Equal(t, next.Usage.InputTokens, count.InputTokens)
		if i%2 == 1 {
			// A finished background response cannot be cancelled: the
			// provider's 400 says so, which proves the call found it (another
			// key gets 404).
			_, err := c.Responses.Cancel(ctx, id)
			if err != nil {
				var apiErr *openai.Error
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, http.StatusBadRequest, apiErr.StatusCode, "cancel %s: %v", id, err)
			}
		}
		require.NoError(t, c.Responses.Delete(ctx, id), "DELETE %s", id)
	}
}

// TestBudgetChargesResponsesEmbeddingsAndTiers: a client with a budget
// uses the Responses API and embeddings through the gateway and is
// charged for them at the price of the tier each answer reports: a flex
// response at half the standard price (the shipped flex factor).
func TestBudgetChargesResponsesEmbeddingsAndTiers(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	prices := pricing.Config{Models: map[string]pricing.Price{"gpt-x": {Input: 10, Output: 100}, "embed-x": {Input: 1, Output: 1}}}
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: prices,
		Clients: append(budgetClient(admit.Budget{Day: 10}),
			clients.Config{Name: "flexonly", Key: "ck-flex", ServiceTiers: admit.ServiceTiers{"flex"}}),
		Upstreams: []upcfg.Config{{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	spent := func() float64 {
		var team admit.ClientSpend
		require.Eventually(t, func() bool {
			team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
			return team.ReservedUSD == 0
		}, 10*time.Second, 10*time.Millisecond)
		return team.Day.SpentUSD
	}
	type usage struct {
		Input  int64 `json:"input_tokens"`
		Output int64 `json:"output_tokens"`
		Prompt int64 `json:"prompt_tokens"`
	}
	var answer struct {
		ServiceTier string `json:"service_tier"`
		Usage       usage  `json:"usage"`
	}
	at := func(in, out int64, factor float64) float64 {
		return factor * (float64(in)*10 + float64(out)*100) / 1e6
	}

	code, body := call(t, "POST", base+"/gpt/v1/responses", "ck-team", `{"model":"gpt-x","max_output_tokens":64,"input":"charge me"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, "default", answer.ServiceTier)
	want := at(answer.Usage.Input, answer.Usage.Output, 1)
	require.InDelta(t, want, spent(), 1e-8)

	code, body = call(t, "POST", base+"/gpt/v1/responses", "ck-team", `{"model":"gpt-x","max_output_tokens":64,"service_tier":"flex","input":"charge me flex"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, "flex", answer.ServiceTier)
	want += at(answer.Usage.Input, answer.Usage.Output, 0.5)
	require.InDelta(t, want, spent(), 1e-8, "the flex response is charged at half price")

	code, body = call(t, "POST", base+"/gpt/v1/responses", "ck-team", `{"model":"gpt-x","max_output_tokens":64,"stream":true,"input":"stream a charge"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Regexp(t, `event: response\.(completed|incomplete)\n`, string(body))
	require.Greater(t, spent(), want, "a Responses stream is charged from the usage of its last event")
	want = spent()

	code, body = call(t, "POST", base+"/gpt/v1/embeddings", "ck-team", `{"model":"embed-x","input":["first text","the second text"]}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, int64(7), answer.Usage.Prompt)
	require.InDelta(t, want+7*1/1e6, spent(), 1e-8)

	// A budgeted client may reach its stored responses (GET) but not an
	// unmetered billable route.
	code, body = call(t, "GET", base+"/gpt/v1/models", "ck-team", "")
	require.NotEqual(t, http.StatusForbidden, code, string(body))
	code, body = call(t, "POST", base+"/gpt/v1/files", "ck-team", `{}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	require.Contains(t, string(body), "/v1/responses")

	// The allow-list of service tiers: 403 in OpenAI's shape naming them.
	code, body = call(t, "POST", base+"/gpt/v1/responses", "ck-flex", `{"model":"gpt-x","input":"standard please"}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	var pe struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &pe))
	require.Equal(t, "permission_error", pe.Error.Type)
	require.Contains(t, pe.Error.Message, "flex")
	code, body = call(t, "POST", base+"/gpt/v1/chat/completions", "ck-flex",
		`{"model":"gpt-x","service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	code, body = call(t, "POST", base+"/gpt/v1/responses", "ck-flex", `{"model":"gpt-x","service_tier":"flex","input":"flex please"}`)
	require.Equal(t, http.StatusOK, code, string(body))
}

// TestResponsesAndEmbeddingsAsJobs: a job and a batch line name their
// endpoint (path, url) and are sent there.
func TestResponsesAndEmbeddingsAsJobs(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up"}},
		Clients:   []clients.Config{{Name: "batch", Key: "ck-batch"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	var job struct {
		ID       json.Number `json:"id"`
		State    string      `json:"state"`
		Response *struct {
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
			Usage  llm.Usage       `json:"usage"`
		} `json:"response"`
	}
	for _, tc := range []struct{ path, request, want string }{
		{"/v1/responses", `{"model":"gpt-4.1","max_output_tokens":32,"input":"a job"}`, `"object":"response"`},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"embed me"}`, `"object":"list"`},
	} {
		code, body := call(t, "POST", base+"/v1/jobs", "ck-batch", `{"upstream":"gpt","path":"`+tc.path+`","request":`+tc.request+`}`)
		require.Equal(t, http.StatusAccepted, code, string(body))
		require.NoError(t, json.Unmarshal(body, &job))
		code, body = call(t, "GET", base+"/v1/jobs/"+job.ID.String()+"?wait=20s", "ck-batch", "")
		require.Equal(t, http.StatusOK, code, string(body))
		require.NoError(t, json.Unmarshal(body, &job))
		require.Equal(t, "succeeded", job.State, string(body))
		require.Equal(t, 200, job.Response.Status)
		require.Contains(t, string(body), tc.want)
		require.Positive(t, job.Response.Usage.InputTokens)
	}
	code, body := call(t, "POST", base+"/v1/jobs", "ck-batch", `{"upstream":"gpt","path":"/v1/files","request":{"model":"x"}}`)
	require.Equal(t, http.StatusBadRequest, code, string(body))
	require.Contains(t, string(body), "/v1/responses")

	lines := []string{
		`{"custom_id":"r1","method":"POST","url":"/v1/responses","body":{"model":"gpt-4.1","max_output_tokens":16,"input":"hi"}}`,
		`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":["a","b"]}}`,
		`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}}`,
	}
	code, body = call(t, "POST", base+"/v1/batches?upstream=gpt", "ck-batch", strings.Join(lines, "\n"))
	require.Equal(t, http.StatusOK, code, string(body))
	var batch struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &batch))
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/batches/"+batch.ID, "ck-batch", "")
		return strings.Contains(string(b), `"ended"`)
	}, 30*time.Second, 50*time.Millisecond)
	code, body = call(t, "GET", base+"/v1/batches/"+batch.ID+"/results", "ck-batch", "")
	require.Equal(t, http.StatusOK, code)
	results := string(body)
	require.Equal(t, 3, strings.Count(results, `"status_code":200`), results)
	require.Contains(t, results, `"object":"response"`)
	require.Contains(t, results, `"object":"embedding"`)
	require.Contains(t, results, `"object":"chat.completion"`)
}

// TestResponsesBurstAboveQuotaSeesNo429: a burst of Responses requests
// several times the mock's token bucket is queued by the gateway, not
// sent into 429s (as TestSDKBurstAboveQuotaSeesNo429 for chat).
func TestResponsesBurstAboveQuotaSeesNo429(t *testing.T) {
	t.Parallel()
	limits := mock.Limits{RPM: 6000, TPM: 240_000}
	f := startGateway(t, limits, 3, mock.Faults{}, func(u *upcfg.Config) { u.BurstSeconds = 1 })
	const burst = 40
	// ~500 input tokens + 256 reserved each: the mock's bucket (3 s, 12K
	// tokens) holds 15 of the 40, the gateway's (1 s) 5.
	prompt := strings.Repeat("word ", 400)
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		wg.Go(func() {
			p := responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(256),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("%d %s", i, prompt))}}
			if i%2 == 0 {
				s := f.openai().Responses.NewStreaming(t.Context(), p)
				for s.Next() {
				}
				errs <- s.Err()
				_ = s.Close()
				return
			}
			_, err := f.openai().Responses.New(t.Context(), p)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "the SDK saw an error")
	}
	st := f.mock.Stats()
	t.Logf("provider saw %v", st.Overall.ByStatus)
	require.Equal(t, int64(burst), st.Overall.ByStatus["200"])
	require.Zero(t, st.Overall.ByStatus["429"], "provider-side 429s: %v", st.Overall.ByStatus)
}
