package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// These tests drive the providers' own batch APIs on the gateway with the
// official SDKs, the gateway in front of the mock provider, and count the
// mock's calls per custom_id through a proxy of their own (each request's
// text names its custom_id), so a lost or repeated request fails them.

// callCounter is a reverse proxy to the mock that counts the calls whose
// body names each custom_id ("cid <id>;").
type callCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
}

var cidPattern = regexp.MustCompile(`cid ([A-Za-z0-9_-]+);`)

func newCallCounter(t *testing.T, target string) *callCounter {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	c := &callCounter{n: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if m := cidPattern.FindSubmatch(body); m != nil {
			c.mu.Lock()
			c.n[string(m[1])]++
			c.mu.Unlock()
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *callCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// batchFixture is a mock, a counter in front of it, and a gateway on a
// SQLite file that can be restarted on the same file.
type batchFixture struct {
	counter *callCounter
	store   string
	rpm     int64
	gateway *Server
}

func newBatchFixture(t *testing.T, rpm int64) *batchFixture {
	t.Helper()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Limits: mock.Limits{RPM: 100_000, ITPM: 100_000_000, OTPM: 10_000_000, TPM: 100_000_000},
		BurstSeconds: 60, OutputTokens: mock.OutputRange{Min: 3, Max: 8}, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	f := &batchFixture{counter: newCallCounter(t, m.URL()), store: "sqlite:" + filepath.Join(t.TempDir(), "sluice.db"), rpm: rpm}
	f.start(t)
	return f
}

// start starts a gateway on the fixture's store (a new one after stop).
func (f *batchFixture) start(t *testing.T) {
	t.Helper()
	up := func(name string, p llm.Protocol) upcfg.Config {
		return upcfg.Config{Name: name, Protocol: p, BaseURL: f.counter.srv.URL, APIKey: "sk-upstream-" + name, BurstSeconds: 1,
			Limits: upcfg.Limits{RequestsPerMinute: f.rpm, MaxConcurrency: 4}}
	}
	g, err := New(Config{Store: f.store, Listen: "127.0.0.1:0",
		Clients:   []clients.Config{{Name: "alice", Key: "ck-alice"}, {Name: "bob", Key: "ck-bob"}},
		Upstreams: []upcfg.Config{up("anthropic", llm.Anthropic), up("openai", llm.OpenAI)}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	f.gateway = g
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
}

func (f *batchFixture) anthropic(key string) *anthropic.Client {
	c := anthropic.NewClient(aoption.WithBaseURL("http://"+f.gateway.Addr()+"/anthropic"),
		aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
	return &c
}

func batchRequests(n int, prefix string) anthropic.MessageBatchNewParams {
	var p anthropic.MessageBatchNewParams
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		p.Requests = append(p.Requests, anthropic.MessageBatchNewParamsRequest{CustomID: id,
			Params: anthropic.MessageBatchNewParamsRequestParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("cid " + id + "; say hello"))}}})
	}
	return p
}

// waitEnded polls the batch until it has ended.
func waitEnded(t *testing.T, c *anthropic.Client, id string) *anthropic.MessageBatch {
	t.Helper()
	var last *anthropic.MessageBatch
	require.Eventually(t, func() bool {
		b, err := c.Messages.Batches.Get(t.Context(), id, anthropic.MessageBatchGetParams{})
		require.NoError(t, err)
		last = b
		return b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded
	}, time.Minute, 20*time.Millisecond)
	return last
}

// results reads a batch's results by custom_id, failing on a repeat.
func results(t *testing.T, c *anthropic.Client, id string) map[string]anthropic.MessageBatchIndividualResponse {
	t.Helper()
	out := map[string]anthropic.MessageBatchIndividualResponse{}
	s := c.Messages.Batches.ResultsStreaming(t.Context(), id, anthropic.MessageBatchResultsParams{})
	for s.Next() {
		r := s.Current()
		_, dup := out[r.CustomID]
		require.False(t, dup, "custom_id %s twice in the results", r.CustomID)
		out[r.CustomID] = r
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	return out
}

func statusOf(t *testing.T, err error) int {
	t.Helper()
	var ae *anthropic.Error
	require.True(t, errors.As(err, &ae), "want an API error, got %v", err)
	return ae.StatusCode
}

func TestProviderBatchesAnthropicSDK(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice, bob := f.anthropic("ck-alice"), f.anthropic("ck-bob")
	ctx := t.Context()

	b, err := alice.Messages.Batches.New(ctx, batchRequests(12, "ok"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(b.ID, "msgbatch_"), b.ID)
	require.Equal(t, b.CreatedAt.Add(24*time.Hour), b.ExpiresAt)
	ended := waitEnded(t, alice, b.ID)
	require.Equal(t, int64(12), ended.RequestCounts.Succeeded)
	require.Zero(t, ended.RequestCounts.Processing+ended.RequestCounts.Errored+ended.RequestCounts.Canceled+ended.RequestCounts.Expired)
	require.False(t, ended.EndedAt.IsZero())
	require.Equal(t, "http://"+f.gateway.Addr()+"/anthropic/v1/messages/batches/"+b.ID+"/results", ended.ResultsURL)

	res := results(t, alice, b.ID)
	require.Len(t, res, 12)
	calls := f.counter.counts()
	for i := range 12 {
		id := fmt.Sprintf("ok-%02d", i)
		r, ok := res[id]
		require.True(t, ok, id)
		require.Equal(t, "succeeded", string(r.Result.Type))
		msg := r.Result.AsSucceeded().Message
		require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
		require.Len(t, strings.Fields(msg.Content[0].Text), int(msg.Usage.OutputTokens), "the mock's answer")
		require.Equal(t, 1, calls[id], "one provider call for %s", id)
	}

	// Listing: alice's own, and nothing of hers for bob.
	page, err := alice.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	require.Equal(t, b.ID, page.Data[0].ID)
	page, err = bob.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{})
	require.NoError(t, err)
	require.Empty(t, page.Data)

	// Another client cannot see, cancel, read or delete it.
	_, err = bob.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	require.Equal(t, http.StatusNotFound, statusOf(t, err))
	_, err = bob.Messages.Batches.Cancel(ctx, b.ID, anthropic.MessageBatchCancelParams{})
	require.Equal(t, http.StatusNotFound, statusOf(t, err))
	_, err = bob.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{})
	require.Equal(t, http.StatusNotFound, statusOf(t, err))
	s := bob.Messages.Batches.ResultsStreaming(ctx, b.ID, anthropic.MessageBatchResultsParams{})
	require.False(t, s.Next())
	require.Equal(t, http.StatusNotFound, statusOf(t, s.Err()))

	// Deleted once ended; then gone.
	del, err := alice.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{})
	require.NoError(t, err)
	require.Equal(t, b.ID, del.ID)
	_, err = alice.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	require.Equal(t, http.StatusNotFound, statusOf(t, err))
}

func TestProviderBatchesAnthropicPaging(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice := f.anthropic("ck-alice")
	var made []string
	for i := range 5 {
		b, err := alice.Messages.Batches.New(t.Context(), batchRequests(1, fmt.Sprintf("pg%d", i)))
		require.NoError(t, err)
		made = append([]string{b.ID}, made...) // newest first
	}
	var seen []string
	iter := alice.Messages.Batches.ListAutoPaging(t.Context(), anthropic.MessageBatchListParams{Limit: anthropic.Int(2)})
	for iter.Next() {
		seen = append(seen, iter.Current().ID)
	}
	require.NoError(t, iter.Err())
	require.Equal(t, made, seen, "every batch once, newest first, over three pages")
	page, err := alice.Messages.Batches.List(t.Context(), anthropic.MessageBatchListParams{BeforeID: anthropic.String(made[3]), Limit: anthropic.Int(2)})
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, []string{made[1], made[2]}, []string{page.Data[0].ID, page.Data[1].ID})
}

func TestProviderBatchesAnthropicValidation(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice := f.anthropic("ck-alice")
	dup := batchRequests(2, "d")
	dup.Requests[1].CustomID = dup.Requests[0].CustomID
	long := batchRequests(1, "x")
	long.Requests[0].CustomID = strings.Repeat("a", 65)
	badChars := batchRequests(1, "x")
	badChars.Requests[0].CustomID = "has space"
	for name, tc := range map[string]struct {
		params anthropic.MessageBatchNewParams
		want   string
	}{
		"duplicate custom_id": {dup, "requests.1.custom_id"},
		"custom_id too long":  {long, "requests.0.custom_id"},
		"custom_id chars":     {badChars, "requests.0.custom_id"},
		"no requests":         {anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{}}, "requests: List should have at least 1 item"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := alice.Messages.Batches.New(t.Context(), tc.params)
			var ae *anthropic.Error
			require.True(t, errors.As(err, &ae), "%v", err)
			require.Equal(t, http.StatusBadRequest, ae.StatusCode)
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			require.NoError(t, json.Unmarshal([]byte(ae.RawJSON()), &body))
			require.Equal(t, "error", body.Type)
			require.Equal(t, "invalid_request_error", body.Error.Type)
			require.Contains(t, body.Error.Message, tc.want)
		})
	}
	page, err := alice.Messages.Batches.List(t.Context(), anthropic.MessageBatchListParams{})
	require.NoError(t, err)
	require.Empty(t, page.Data, "a refused create queues nothing")
}

// TestProviderBatchesAnthropicRefusedParams: as Anthropic validates each
// request's params asynchronously, a request whose params would be
// refused does not fail the create: it ends as an errored result
// (invalid_request_error), counted in request_counts.errored, never sent
// to the provider and never charged; the batch's other requests run.
func TestProviderBatchesAnthropicRefusedParams(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice := f.anthropic("ck-alice")
	params := batchRequests(6, "rp")
	params.Requests[1].Params.MaxTokens = 0
	params.Requests[4].Params.Messages = []anthropic.MessageParam{}
	b, err := alice.Messages.Batches.New(t.Context(), params)
	require.NoError(t, err, "the params are checked after the create")
	require.Equal(t, anthropic.MessageBatchProcessingStatusInProgress, b.ProcessingStatus)
	ended := waitEnded(t, alice, b.ID)
	require.Equal(t, int64(4), ended.RequestCounts.Succeeded)
	require.Equal(t, int64(2), ended.RequestCounts.Errored)
	require.Zero(t, ended.RequestCounts.Processing+ended.RequestCounts.Canceled+ended.RequestCounts.Expired)

	res := results(t, alice, b.ID)
	require.Len(t, res, 6)
	calls := f.counter.counts()
	for i := range 6 {
		id := fmt.Sprintf("rp-%02d", i)
		r := res[id]
		if i == 1 || i == 4 {
			require.Equal(t, "errored", string(r.Result.Type), id)
			e := r.Result.AsErrored().Error
			require.Equal(t, "error", string(e.Type), id)
			require.Equal(t, "invalid_request_error", string(e.Error.Type), id)
			require.NotEmpty(t, e.Error.Message, id)
			require.Zero(t, calls[id], "%s was never sent", id)
			continue
		}
		require.Equal(t, "succeeded", string(r.Result.Type), id)
		require.Equal(t, 1, calls[id], id)
	}
	page, err := f.gateway.jobs.Load().Store().BatchJobs(t.Context(), jobstore.BatchJobsParams{BatchID: b.ID})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 6)
	for _, j := range page.Jobs {
		if j.CustomID == "rp-01" || j.CustomID == "rp-04" {
			require.Equal(t, jobstore.StateDead, j.State, j.CustomID)
			require.Zero(t, j.Attempts, "%s was never attempted", j.CustomID)
			require.Empty(t, j.Result.Header.Get(jobs.CostHeader), "%s cost nothing", j.CustomID)
			continue
		}
		require.NotEmpty(t, j.Result.Header.Get(jobs.CostHeader), "%s was charged", j.CustomID)
	}
}

func TestProviderBatchesAnthropicCancel(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 240) // 4 calls a second: the batch takes a while
	alice := f.anthropic("ck-alice")
	b, err := alice.Messages.Batches.New(t.Context(), batchRequests(16, "cx"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := alice.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
		require.NoError(t, err)
		return got.RequestCounts.Succeeded >= 2
	}, time.Minute, 10*time.Millisecond)
	c, err := alice.Messages.Batches.Cancel(t.Context(), b.ID, anthropic.MessageBatchCancelParams{})
	require.NoError(t, err)
	require.False(t, c.CancelInitiatedAt.IsZero())
	require.Less(t, c.RequestCounts.Succeeded, int64(16), "canceled mid-batch")
	ended := waitEnded(t, alice, b.ID)
	require.Positive(t, ended.RequestCounts.Canceled, "some requests were canceled")
	require.Equal(t, int64(16), ended.RequestCounts.Succeeded+ended.RequestCounts.Canceled, "none lost")

	res := results(t, alice, b.ID)
	require.Len(t, res, 16, "every custom_id once")
	calls := f.counter.counts()
	for id, r := range res {
		require.LessOrEqual(t, calls[id], 1, id)
		if r.Result.Type == "succeeded" {
			require.Equal(t, 1, calls[id], id)
		} else {
			require.Equal(t, "canceled", string(r.Result.Type), id)
		}
	}
}

func TestProviderBatchesAnthropicRestart(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 240)
	b, err := f.anthropic("ck-alice").Messages.Batches.New(t.Context(), batchRequests(16, "rs"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := f.anthropic("ck-alice").Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
		require.NoError(t, err)
		return got.RequestCounts.Succeeded >= 2
	}, time.Minute, 10*time.Millisecond)
	// A new gateway on the same file, mid-batch.
	require.NoError(t, f.gateway.Stop(context.Background()))
	require.Less(t, len(f.counter.counts()), 16, "stopped mid-batch")
	f.start(t)
	alice := f.anthropic("ck-alice")
	ended := waitEnded(t, alice, b.ID)
	require.Equal(t, int64(16), ended.RequestCounts.Succeeded)
	res := results(t, alice, b.ID)
	require.Len(t, res, 16)
	calls := f.counter.counts()
	for i := range 16 {
		id := fmt.Sprintf("rs-%02d", i)
		require.Equal(t, "succeeded", string(res[id].Result.Type), id)
		require.Equal(t, 1, calls[id], "%s called once across the restart", id)
	}
}
