package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// The official SDKs' batch calls on an upstream whose batch: section
// routes their class to the provider's Batch API, end to end: SDK →
// the gateway's answered batch API → its job queue → the router's
// provider batches at the mock → the results back into the jobs → the
// SDK's results. The gateway and the mock share one fake clock.

// routedBatchRig is a mock on a fake clock and a routed gateway before it
// (routedGateway: groups of 50, max_wait 10m, polls every minute).
type routedBatchRig struct {
	fc   *clock.Fake
	mock *mock.Server
	gw   *Server
}

func newRoutedBatchRig(t *testing.T, p llm.Protocol) *routedBatchRig {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC))
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Clock: fc, OutputTokens: mock.OutputRange{Min: 5, Max: 40}, Seed: 11,
		Batch: mock.BatchConfig{Processing: 30 * time.Minute, Prices: batchPrices}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	return &routedBatchRig{fc: fc, mock: m, gw: routedGateway(t, p, m.URL(), testStore(t), fc)}
}

// until advances the fake clock a minute at a time until done.
func (r *routedBatchRig) until(t *testing.T, done func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.fc.Advance(time.Minute)
		return done()
	}, time.Minute, 10*time.Millisecond)
}

// checkBilled checks the mock's view of the run: n lines in batches
// provider batches, every one succeeded and billed once, none sent the
// synchronous way, and the gateway's spend what the mock billed, to the
// nano-dollar.
func (r *routedBatchRig) checkBilled(t *testing.T, n int, batches int64) {
	t.Helper()
	stats := r.mock.Stats().Overall
	require.Equal(t, batches, stats.Batch.Batches, "the requests went grouped, each group once")
	require.Equal(t, int64(n), stats.Batch.Lines["succeeded"])
	require.Zero(t, stats.Admitted.Requests, "no request went the synchronous way")
	rows, err := r.gw.jobs.Load().Store().Spend(t.Context(), jobstore.SpendParams{})
	require.NoError(t, err)
	var nanos, requests int64
	for _, row := range rows {
		require.Equal(t, "nightly", row.Client)
		nanos += row.Nanos
		requests += row.Requests
	}
	require.Equal(t, int64(n), requests)
	require.Positive(t, stats.Batch.CostNanos)
	require.Equal(t, stats.Batch.CostNanos, nanos, "charged what the provider billed, once")
}

func TestProviderBatchesAnthropicSDKRouted(t *testing.T) {
	t.Parallel()
	rig := newRoutedBatchRig(t, llm.Anthropic)
	c := anthropic.NewClient(aoption.WithBaseURL("http://"+rig.gw.Addr()+"/up"), aoption.WithAPIKey("ck-nightly"), aoption.WithMaxRetries(0))
	const n = 60
	b, err := c.Messages.Batches.New(t.Context(), batchRequests(n, "rt"))
	require.NoError(t, err)
	var ended *anthropic.MessageBatch
	rig.until(t, func() bool {
		got, err := c.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
		require.NoError(t, err)
		ended = got
		return got.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded
	})
	require.Equal(t, int64(n), ended.RequestCounts.Succeeded)

	res := results(t, &c, b.ID) // fails on a custom_id seen twice
	require.Len(t, res, n)
	for i := range n {
		id := fmt.Sprintf("rt-%02d", i)
		r, ok := res[id]
		require.True(t, ok, id)
		require.Equal(t, "succeeded", string(r.Result.Type), id)
		msg := r.Result.AsSucceeded().Message
		require.Equal(t, anthropic.UsageServiceTierBatch, msg.Usage.ServiceTier, "%s answered by the provider's Batch API", id)
		require.Len(t, strings.Fields(msg.Content[0].Text), int(msg.Usage.OutputTokens), "the mock's answer")
	}
	rig.checkBilled(t, n, 2) // 50 at once, 10 after max_wait
}

func TestProviderBatchesOpenAISDKRouted(t *testing.T) {
	t.Parallel()
	rig := newRoutedBatchRig(t, llm.OpenAI)
	c := openai.NewClient(ooption.WithBaseURL("http://"+rig.gw.Addr()+"/up/v1"), ooption.WithAPIKey("ck-nightly"), ooption.WithMaxRetries(0))
	const n = 60
	in, err := c.Files.New(t.Context(), openai.FileNewParams{File: bytes.NewReader(chatLines(n, "ro")), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	b, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: in.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusValidating, b.Status)
	rig.until(t, func() bool {
		b, err = c.Batches.Get(t.Context(), b.ID)
		require.NoError(t, err)
		return b.Status == openai.BatchStatusCompleted
	})
	require.Equal(t, int64(n), b.RequestCounts.Completed)
	require.Empty(t, b.ErrorFileID)

	resp, err := c.Files.Content(t.Context(), b.OutputFileID)
	require.NoError(t, err)
	content, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(content)), "\n") {
		var r struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int                   `json:"status_code"`
				Body       openai.ChatCompletion `json:"body"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, 200, r.Response.StatusCode)
		require.Equal(t, "chat.completion", string(r.Response.Body.Object))
		require.Equal(t, r.Response.Body.Usage.CompletionTokens, int64(len(strings.Fields(r.Response.Body.Choices[0].Message.Content))), "the mock's answer")
		seen[r.CustomID]++
	}
	require.Len(t, seen, n)
	for i := range n {
		id := fmt.Sprintf("ro-%02d", i)
		require.Equal(t, 1, seen[id], "%s answered exactly once", id)
	}
	rig.checkBilled(t, n, 2)
}
