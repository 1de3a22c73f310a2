package jobs

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/webhook"
)

// pausedStore drops heartbeats and, once frozen, claims nothing, as a
// worker stalled by a GC pause or a network partition would.
type pausedStore struct {
	jobstore.Store
	dropped atomic.Int64
	frozen  atomic.Bool
}

func (p *pausedStore) Claim(ctx context.Context, c jobstore.ClaimParams) ([]*jobstore.Job, error) {
	if p.frozen.Load() {
		return nil, nil
	}
	return p.Store.Claim(ctx, c)
}

func (p *pausedStore) Heartbeat(context.Context, jobstore.HeartbeatParams) error {
	p.dropped.Add(1)
	return nil
}

func TestStaleWorkerCannotOverwriteNewerResult(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	stale, entered, unblock := gated(`{"from":"stale worker"}`)
	fresh := &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return reply(200, `{"from":"new worker"}`), nil
	}}
	edit := func(owner string) func(*Config) {
		return func(c *Config) {
			c.Clock, c.Owner, c.RescueInterval, c.LeaseFor = clk, owner, -1, 30*time.Second
		}
	}
	ps := &pausedStore{Store: st}
	a := newService(t, ps, stale, nil, edit("A"))
	j := submit(t, a, "")
	<-entered
	ps.frozen.Store(true)
	// A is stuck in its call and its heartbeats go nowhere; the lease runs out.
	clk.Advance(31 * time.Second)
	res, err := st.Rescue(context.Background(), jobstore.RescueParams{MaxStalls: 3, Now: clk.Now()})
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)

	// B takes the job over and finishes it while A is still stuck.
	b := newService(t, st, fresh, nil, edit("B"))
	got := waitFor(t, st, j.ID, jobstore.StateSucceeded)
	require.Equal(t, "B", got.Lease.Owner)
	require.JSONEq(t, `{"from":"new worker"}`, string(got.Result.Body))
	require.NoError(t, b.Stop(context.Background()))

	// A wakes up with its answer and tries to write it with its old token.
	unblock()
	require.NoError(t, a.Stop(context.Background()), "Stop waits for A's job to finish")

	final, err := st.Get(context.Background(), j.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"from":"new worker"}`, string(final.Result.Body), "the stale worker's result was fenced off")
	require.Equal(t, 1, stale.Calls())
	require.Equal(t, 1, fresh.Calls())
	require.Equal(t, 1, final.Stalls)
}

func TestWebhookSignedAndRetried(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	verifier, err := webhook.NewSigner(secret)
	require.NoError(t, err)
	ids := make(chan string, 3)
	var calls atomic.Int64
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !webhook.VerifySignature(secret, body, r.Header.Get(webhook.SignatureHeader)) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := verifier.Verify(body, r.Header); err != nil { // the Standard Webhooks check, timestamp included
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ids <- r.Header.Get(webhook.HeaderID)
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable) // fail twice, then accept
			return
		}
		got <- body
	}))
	defer srv.Close()
	s := newService(t, nil, succeed(), nil, func(c *Config) {
		c.WebhookSecret, c.Webhooks.BaseDelay = secret, time.Millisecond
		c.WebhookClient = srv.Client()
	})
	j := submit(t, s, `,"webhook_url":"`+srv.URL+`/hook"`)
	body := <-got
	v := decode[jobsapi.JobView](t, body)
	require.Equal(t, j.ID, v.ID)
	require.Equal(t, "succeeded", string(v.State))
	require.EqualValues(t, 3, calls.Load())
	first := <-ids
	require.True(t, strings.HasPrefix(first, "msg_"), first)
	require.Equal(t, first, <-ids, "every attempt has the same webhook-id")
	require.Equal(t, first, <-ids)
	require.True(t, strings.HasPrefix(webhook.Sign(secret, body), "sha256="))
	require.False(t, webhook.VerifySignature("other", body, webhook.Sign(secret, body)))
}

// TestWebhookOncePerCancel: canceling a canceled job again answers with
// the job but sends no second webhook.
func TestWebhookOncePerCancel(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	got := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1); got <- struct{}{} }))
	defer srv.Close()
	hold, entered, _ := gated(okMessage) // never released: the cancel ends the call
	st := openStore(t)
	s := newService(t, st, hold, nil, func(c *Config) { c.WebhookClient = srv.Client() })
	j := submit(t, s, `,"webhook_url":"`+srv.URL+`"`)
	<-entered
	for range 3 {
		got, err := s.Cancel(context.Background(), j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateCanceled, got.State)
	}
	<-got
	require.NoError(t, s.Stop(context.Background()))
	require.EqualValues(t, 1, calls.Load())
	ds, err := st.Deliveries(context.Background(), j.ID)
	require.NoError(t, err)
	require.Len(t, ds, 1, "one delivery for one cancel")
	require.Equal(t, jobstore.DeliveryDelivered, ds[0].State)
}
