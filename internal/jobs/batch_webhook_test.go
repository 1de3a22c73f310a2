package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

const batchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// gateway is one life of a gateway on the store file dsn: its own store
// handle and a sender on the shared fake clock (not started: the test
// drives it). Dying is dropping it without Stop.
func gateway(t *testing.T, dsn string, clk *clock.Fake) *outbox {
	t.Helper()
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	o := newOutbox(t, st, func(c *Config) { c.WebhookSecret, c.Clock = batchSecret, clk })
	o.clk = clk
	return o
}

// endHookedBatch creates a batch of n jobs with webhook url and finishes
// them through the store (the last one fails for good), returning its id.
func endHookedBatch(t *testing.T, o *outbox, n int, url string) string {
	t.Helper()
	ctx := context.Background()
	var jobs []jobstore.InsertParams
	for i := range n {
		jobs = append(jobs, jobstore.InsertParams{Upstream: "claude", Priority: llm.Low, Path: "/v1/messages",
			Body: []byte(anthropicBody), MaxAttempts: 1, CustomID: fmt.Sprintf("r%d", i)})
	}
	b, err := o.st.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Upstream: "claude", Jobs: jobs,
		WebhookURL: url, Now: o.clk.Now()})
	require.NoError(t, err)
	claimed, err := o.st.Claim(ctx, jobstore.ClaimParams{Limit: n, Owner: "w", LeaseFor: time.Minute, Now: o.clk.Now()})
	require.NoError(t, err)
	require.Len(t, claimed, n)
	for i, j := range claimed {
		if i == n-1 {
			_, err := o.st.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: j.Lease.Token, Kind: jobstore.FailTerminal,
				Error: jobstore.AttemptError{Status: 400, Message: "refused"}, Now: o.clk.Now()})
			require.NoError(t, err)
			continue
		}
		require.NoError(t, o.st.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token,
			Result: jobstore.Result{Status: 200, Body: []byte(okMessage)}, Now: o.clk.Now()}))
	}
	return b.ID
}

// requireBatchEvent: body is b's completion event with id.
func requireBatchEvent(t *testing.T, body []byte, id, batchID string, want jobstore.BatchEvent, succeeded, dead int) {
	t.Helper()
	var ev jobsapi.BatchEvent
	require.NoError(t, json.Unmarshal(body, &ev), string(body))
	require.Equal(t, id, ev.ID, "the event's id is its webhook-id")
	require.Equal(t, "event", ev.Object)
	require.Equal(t, want, ev.Type)
	require.Equal(t, batchID, ev.Data.ID)
	require.Equal(t, jobsapi.StateCounts{Succeeded: succeeded, Dead: dead}, ev.Data.Counts)
	require.NotNil(t, ev.Data.EndedAt)
}

// TestBatchWebhookOnceAcrossRestart: a batch with a webhook URL ends while
// its receiver is down; its gateway's attempt fails and the gateway dies
// (no Stop); a gateway started afterwards on the same store file sends
// the event once the retry is due: the receiver gets one POST, signed,
// with one webhook-id and the batch's event, and nothing more however
// long the gateway runs or how often it is restarted.
func TestBatchWebhookOnceAcrossRestart(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	rc := newReceiver(t, batchSecret)
	clk := clock.NewFake(t0)
	a := gateway(t, dsn, clk)
	id := endHookedBatch(t, a, 3, rc.url())
	rc.down()
	a.deliverDue(t)
	ds, err := a.st.BatchDeliveries(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, jobstore.DeliveryPending, ds[0].State)
	require.Equal(t, 1, ds[0].Attempts)
	require.Contains(t, ds[0].LastError, "posting webhook")

	rc.up()
	b := gateway(t, dsn, clk) // a died: b is the next process on the file
	b.runFor(t, time.Hour, time.Second)
	c := gateway(t, dsn, clk) // and b died too, after it delivered
	c.runFor(t, 2*time.Hour, time.Minute)

	hits, ok, bad := rc.snapshot()
	require.Empty(t, bad, "signatures that failed to verify")
	require.Len(t, hits, 1, "one POST in all")
	require.Equal(t, map[string]int{ds[0].ID: 1}, ok)
	requireBatchEvent(t, hits[0].body, ds[0].ID, id, jobstore.BatchCompleted, 2, 1)
	ds, err = c.st.BatchDeliveries(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, jobstore.DeliveryDelivered, ds[0].State)
	require.Equal(t, 2, ds[0].Attempts)
	requireHostOnlyLogs(t, b, rc)
}

// TestBatchWebhookCrashAfterPostKeepsItsID: a gateway that dies between
// the POST (which the receiver took in) and the write of its result leaves
// the delivery leased; the next gateway sends it again only once that
// lease has ended, with the same webhook-id, so the receiver, which
// deduplicates by it, processes the event once.
func TestBatchWebhookCrashAfterPostKeepsItsID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	rc := newReceiver(t, batchSecret)
	clk := clock.NewFake(t0)
	a := gateway(t, dsn, clk)
	id := endHookedBatch(t, a, 2, rc.url())
	// a's attempt, cut short by its death after the POST.
	claimed, err := a.s.hooks.claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	body, err := a.s.hooks.render(ctx, claimed[0])
	require.NoError(t, err)
	_, err = a.s.post(ctx, claimed[0].WebhookURL, claimed[0].ID, body, a.clk.Now())
	require.NoError(t, err)

	b := gateway(t, dsn, clk)
	b.deliverDue(t)
	hits, _, _ := rc.snapshot()
	require.Len(t, hits, 1, "not again while the dead gateway's lease holds")
	b.runFor(t, time.Minute, time.Second) // the lease: the POST timeout and its slack
	b.runFor(t, time.Hour, time.Minute)

	hits, ok, bad := rc.snapshot()
	require.Empty(t, bad)
	require.Len(t, hits, 2)
	require.Equal(t, map[string]int{claimed[0].ID: 2}, ok, "one id: the receiver processes it once")
	for _, h := range hits {
		requireBatchEvent(t, h.body, claimed[0].ID, id, jobstore.BatchCompleted, 1, 1)
	}
	ds, err := b.st.BatchDeliveries(ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobstore.DeliveryDelivered, ds[0].State)
}
