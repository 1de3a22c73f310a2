package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/webhook"
)

// The outbox tests run the real sender (claim, POST, record) against a real
// HTTP receiver, on a fake clock that the test moves: deliverDue is one
// pass of the loop, run to completion. The webhook URL has a secret path
// and query, which logs must never show.
const (
	hookPath  = "/hooks/secret-path"
	hookQuery = "token=hunter2"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// hit is one POST the receiver got.
type hit struct {
	id   string
	job  int64
	body []byte
}

// receiver is a webhook endpoint whose answer the test sets, and which it
// can take down (connections refused) and bring back on the same address.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	addr   string
	srv    *http.Server
	served chan struct{}
	answer func(w http.ResponseWriter, r *http.Request) // nil: 200
	hits   []hit
	ok     map[string]int // 2xx answers per webhook-id
	bad    []string       // signature failures
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{t: t, secret: secret, ok: map[string]int{}}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (rc *receiver) url() string { return "http://" + rc.addr + hookPath + "?" + hookQuery }

// up listens (on the same address as before, when it was up once).
func (rc *receiver) up() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	addr := rc.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	require.NoError(rc.t, err)
	rc.addr = ln.Addr().String()
	rc.srv = &http.Server{Handler: http.HandlerFunc(rc.serve), ReadHeaderTimeout: 5 * time.Second}
	rc.served = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln)
	}(rc.srv, rc.served)
}

// down closes the listener: connections are refused until up.
func (rc *receiver) down() {
	rc.mu.Lock()
	srv, served := rc.srv, rc.served
	rc.srv = nil
	rc.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-served
	}
}

func (rc *receiver) setAnswer(f func(w http.ResponseWriter, r *http.Request)) {
	rc.mu.Lock()
	rc.answer = f
	rc.mu.Unlock()
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var v jobsapi.JobView
	_ = json.Unmarshal(body, &v)
	id := r.Header.Get(webhook.HeaderID)
	rc.mu.Lock()
	rc.hits = append(rc.hits, hit{id: id, job: v.ID, body: body})
	if rc.secret != "" {
		wh, err := webhook.NewSigner(rc.secret)
		// The fake clock is not the wall clock: the timestamp's freshness
		// is checked by TestWebhookSignedAndRetried.
		if err != nil || wh.VerifyIgnoringTimestamp(body, r.Header) != nil {
			rc.bad = append(rc.bad, id)
		}
	}
	answer := rc.answer
	rc.mu.Unlock()
	if answer != nil {
		rw := &statusWriter{ResponseWriter: w, status: 200}
		answer(rw, r)
		if rw.status/100 == 2 && r.Context().Err() == nil {
			rc.accepted(id)
		}
		return
	}
	rc.accepted(id)
}

func (rc *receiver) accepted(id string) {
	rc.mu.Lock()
	rc.ok[id]++
	rc.mu.Unlock()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

func (rc *receiver) snapshot() ([]hit, map[string]int, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ok := make(map[string]int, len(rc.ok))
	for k, v := range rc.ok {
		ok[k] = v
	}
	return append([]hit(nil), rc.hits...), ok, append([]string(nil), rc.bad...)
}

// outbox is a service (not started: the test drives deliveries) on a fake
// clock, logging into logs.
type outbox struct {
	clk  *clock.Fake
	st   jobstore.Store
	s    *testService
	rec  *recorder
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newOutbox(t *testing.T, st jobstore.Store, edit func(*Config)) *outbox {
	t.Helper()
	o := &outbox{clk: clock.NewFake(t0), rec: &recorder{}, logs: &syncBuffer{}}
	if st == nil {
		st = openStore(t)
	}
	o.st = st
	o.s = newService(t, st, succeed(), nil, func(c *Config) {
		c.Owner, c.Clock, c.Observer = "manual", o.clk, o.rec
		c.Logger = slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.WebhookClient = &http.Client{Transport: &http.Transport{}}
		if edit != nil {
			edit(c)
		}
	})
	return o
}

// finish completes n jobs with webhook url through the store, now.
func (o *outbox) finish(t *testing.T, n int, url string) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for range n {
		res, err := o.st.Insert(ctx, jobstore.InsertParams{Upstream: "claude", Priority: llm.Normal, Path: "/v1/messages",
			Body: []byte(anthropicBody), MaxAttempts: 1, WebhookURL: url, Now: o.clk.Now()})
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	claimed, err := o.st.Claim(ctx, jobstore.ClaimParams{Limit: n, Owner: "w", LeaseFor: time.Minute, Now: o.clk.Now()})
	require.NoError(t, err)
	require.Len(t, claimed, n)
	for _, j := range claimed {
		require.NoError(t, o.st.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token,
			Result: jobstore.Result{Status: 200, Body: []byte(okMessage)}, Now: o.clk.Now()}))
	}
	return ids
}

// deliverDue runs the sender until nothing is due now.
func (o *outbox) deliverDue(t *testing.T) {
	t.Helper()
	for {
		n, err := o.s.hooks.deliverDue(context.Background())
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// runFor moves the clock by step until d has passed, delivering what is due
// at each step.
func (o *outbox) runFor(t *testing.T, d, step time.Duration) {
	t.Helper()
	for end := o.clk.Now().Add(d); o.clk.Now().Before(end); o.clk.Advance(step) {
		o.deliverDue(t)
	}
	o.deliverDue(t)
}

func (o *outbox) deliveries(t *testing.T, ids []int64) map[int64]*jobstore.WebhookDelivery {
	t.Helper()
	out := map[int64]*jobstore.WebhookDelivery{}
	for _, id := range ids {
		ds, err := o.st.Deliveries(context.Background(), id)
		require.NoError(t, err)
		require.Len(t, ds, 1, "job %d", id)
		out[id] = ds[0]
	}
	return out
}

// requireExactlyOnce: every job's delivery is delivered, the receiver
// accepted each delivery id exactly once, and every POST it got for a job
// carried that job's one delivery id.
func requireExactlyOnce(t *testing.T, o *outbox, rc *receiver, ids []int64) {
	t.Helper()
	requireDelivered(t, o, rc, ids, func(n int) bool { return n == 1 })
}

// requireDelivered is requireExactlyOnce with the number of acceptances
// per delivery checked by accepted: a receiver whose 2xx can arrive after
// the sender's timeout (a loaded machine) legitimately accepts a repeat,
// which carries the same id.
func requireDelivered(t *testing.T, o *outbox, rc *receiver, ids []int64, accepted func(int) bool) {
	t.Helper()
	ds := o.deliveries(t, ids)
	hits, ok, bad := rc.snapshot()
	require.Empty(t, bad, "signatures that failed to verify")
	for _, id := range ids {
		d := ds[id]
		require.Equal(t, jobstore.DeliveryDelivered, d.State, "job %d: %+v", id, d)
		require.True(t, accepted(ok[d.ID]), "job %d: delivery %s accepted %d times", id, d.ID, ok[d.ID])
	}
	require.Len(t, ok, len(ids), "accepted ids: one per job")
	for _, h := range hits {
		require.Equal(t, ds[h.job].ID, h.id, "a POST for job %d with another id", h.job)
	}
	requireHostOnlyLogs(t, o, rc)
}

// requireHostOnlyLogs: the logs name the receiver's host, never its path
// or query.
func requireHostOnlyLogs(t *testing.T, o *outbox, rc *receiver) {
	t.Helper()
	logs := o.logs.String()
	require.NotContains(t, logs, "secret-path")
	require.NotContains(t, logs, "hunter2")
	require.NotContains(t, logs, "token=")
	if logs != "" {
		require.Contains(t, logs, "host="+rc.addr)
	}
}

// TestWebhookReceiverDownThenUp: the receiver refuses connections for 60 s
// of (fake) time, then comes back: every completion is delivered, each
// exactly once by its delivery id. (Before the outbox: 5 attempts at 1, 2,
// 4, 8 s, then dropped: 0 of 20 delivered after 30 s down.)
func TestWebhookReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rc := newReceiver(t, secret)
	o := newOutbox(t, nil, func(c *Config) { c.WebhookSecret = secret })
	rc.down()
	ids := o.finish(t, 20, rc.url())
	o.runFor(t, 60*time.Second, time.Second)
	hits, _, _ := rc.snapshot()
	require.Empty(t, hits)
	for _, d := range o.deliveries(t, ids) {
		require.Equal(t, jobstore.DeliveryPending, d.State)
		require.Greater(t, d.Attempts, 3, "retried while down")
		require.Contains(t, d.LastError, "connection refused")
		require.NotContains(t, d.LastError, hookQuery)
	}
	rc.up()
	o.runFor(t, 2*WebhookMaxDelayDefault, 10*time.Second)
	requireExactlyOnce(t, o, rc, ids)
	snap := o.rec.snapshot().Webhooks
	require.Equal(t, 20, snap[WebhookDelivered])
	require.Positive(t, snap[WebhookFailed])
	require.Zero(t, snap[WebhookGaveUp])
}

// TestWebhookReceiver503ThenOK: the receiver answers 503 for a while, then
// 200: every completion is delivered, each exactly once. (Before: 0 of 20
// after 30 s of 503.)
func TestWebhookReceiver503ThenOK(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "")
	o := newOutbox(t, nil, nil)
	rc.setAnswer(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	ids := o.finish(t, 20, rc.url())
	o.runFor(t, 60*time.Second, time.Second)
	for _, d := range o.deliveries(t, ids) {
		require.Equal(t, jobstore.DeliveryPending, d.State)
		require.Equal(t, http.StatusServiceUnavailable, d.LastStatus)
	}
	rc.setAnswer(nil)
	o.runFor(t, 2*WebhookMaxDelayDefault, 10*time.Second)
	requireExactlyOnce(t, o, rc, ids)
}

// TestWebhookSlowReceiverDuplicatesKeepTheirID: a receiver slower than the
// POST timeout gets the webhook again, but always with the same webhook-id,
// so it can deduplicate. (Before: 20/20 webhooks sent twice, with no id.)
func TestWebhookSlowReceiverDuplicatesKeepTheirID(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "")
	// The timeout must leave a fast answer time to arrive, even under -race
	// on a loaded machine: an answer later than it is a (legitimate) repeat.
	o := newOutbox(t, nil, func(c *Config) { c.Webhooks.Timeout = 250 * time.Millisecond })
	// Slow: the receiver takes the webhook in, but answers only after the
	// sender gave up (it waits for the sender to hang up).
	rc.setAnswer(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ids := o.finish(t, 20, rc.url())
	o.runFor(t, 5*time.Second, time.Second)
	rc.setAnswer(nil)
	o.runFor(t, 2*WebhookMaxDelayDefault, 10*time.Second)
	// A fast answer later than the 250 ms timeout on a loaded machine is a
	// legitimate repeat: what matters is that it carries the same id.
	requireDelivered(t, o, rc, ids, func(n int) bool { return n >= 1 })
	hits, _, _ := rc.snapshot()
	perJob := map[int64]int{}
	for _, h := range hits {
		perJob[h.job]++
	}
	for _, id := range ids {
		require.GreaterOrEqual(t, perJob[id], 2, "job %d: the slow receiver got duplicates", id)
	}
	for _, d := range o.deliveries(t, ids) {
		require.Empty(t, d.LastError, "the error of an attempt that failed is cleared on delivery")
	}
}

// TestWebhookRetryForExpiry: a delivery still refused when its retry
// window ends is marked failed, counted as given up and logged with the
// host only; a redeliver (same id) sends it again at once.
func TestWebhookRetryForExpiry(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "")
	o := newOutbox(t, nil, func(c *Config) { c.Webhooks.RetryFor = 10 * time.Minute })
	rc.setAnswer(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	ids := o.finish(t, 1, rc.url())
	o.runFor(t, 10*time.Minute-time.Second, time.Second)
	d := o.deliveries(t, ids)[ids[0]]
	require.Equal(t, jobstore.DeliveryPending, d.State, "still inside its window")
	o.runFor(t, time.Hour, time.Second)
	d = o.deliveries(t, ids)[ids[0]]
	require.Equal(t, jobstore.DeliveryFailed, d.State)
	require.Equal(t, http.StatusBadGateway, d.LastStatus)
	require.Equal(t, t0.Add(10*time.Minute), d.FinishedAt, "the last try is at the end of the window")
	hits, _, _ := rc.snapshot()
	require.Len(t, hits, d.Attempts, "no attempt after the window")
	require.Equal(t, 1, o.rec.snapshot().Webhooks[WebhookGaveUp])
	require.Contains(t, o.logs.String(), "webhook delivery failed for good")
	requireHostOnlyLogs(t, o, rc)

	rc.setAnswer(nil)
	code, body := do(t, o.s.Handler(), "POST", "/v1/jobs/"+formatID(ids[0])+"/webhook/redeliver", "")
	require.Equal(t, http.StatusAccepted, code, string(body))
	v := decode[jobsapi.DeliveryView](t, body)
	require.Equal(t, d.ID, v.ID, "a redeliver keeps the delivery id")
	require.Equal(t, jobstore.DeliveryPending, v.State)
	o.deliverDue(t)
	_, ok, _ := rc.snapshot()
	require.Equal(t, map[string]int{d.ID: 1}, ok)
}

// TestWebhookRedeliverRoute: the route's answers, and the job's view of
// its deliveries.
func TestWebhookRedeliverRoute(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "")
	o := newOutbox(t, nil, nil)
	h := o.s.Handler()
	ids := o.finish(t, 1, rc.url())
	o.deliverDue(t)

	code, body := do(t, h, "GET", "/v1/jobs/"+formatID(ids[0]), "")
	require.Equal(t, http.StatusOK, code)
	v := decode[jobsapi.JobView](t, body)
	require.Len(t, v.WebhookDeliveries, 1)
	d := v.WebhookDeliveries[0]
	require.Equal(t, jobstore.DeliveryDelivered, d.State)
	require.Equal(t, string(jobstore.StateSucceeded), d.Event)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, http.StatusOK, d.LastStatus)
	require.Nil(t, d.NextAttemptAt)

	o.clk.Advance(time.Minute)
	code, body = do(t, h, "POST", "/v1/jobs/"+formatID(ids[0])+"/webhook/redeliver", "")
	require.Equal(t, http.StatusAccepted, code, string(body))
	r := decode[jobsapi.DeliveryView](t, body)
	require.Equal(t, d.ID, r.ID)
	require.Equal(t, t0.Add(time.Minute), *r.NextAttemptAt)
	o.deliverDue(t)
	_, ok, _ := rc.snapshot()
	require.Equal(t, 2, ok[d.ID], "redelivered with the same id")

	plain := o.finish(t, 1, "")
	code, body = do(t, h, "POST", "/v1/jobs/"+formatID(plain[0])+"/webhook/redeliver", "")
	require.Equal(t, http.StatusConflict, code, string(body))
	code, _ = do(t, h, "POST", "/v1/jobs/999999/webhook/redeliver", "")
	require.Equal(t, http.StatusNotFound, code)
}

// TestWebhookSendersShareOnePostgres: two gateways' senders on one
// PostgreSQL queue, racing, send every delivery exactly once.
func TestWebhookSendersShareOnePostgres(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	open := func() jobstore.Store {
		st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	}
	rc := newReceiver(t, "")
	a, b := newOutbox(t, open(), func(c *Config) { c.WebhookConcurrency = 3 }), newOutbox(t, open(), func(c *Config) { c.WebhookConcurrency = 3 })
	b.clk = a.clk
	ids := a.finish(t, 40, rc.url())
	var wg sync.WaitGroup
	for _, o := range []*outbox{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := o.s.hooks.deliverDue(context.Background())
				if err != nil || n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	_, ok, _ := rc.snapshot()
	require.Len(t, ok, 40)
	for id, n := range ok {
		require.Equal(t, 1, n, "delivery %s sent %d times", id, n)
	}
	for _, d := range a.deliveries(t, ids) {
		require.Equal(t, jobstore.DeliveryDelivered, d.State)
	}
	da, db := a.rec.snapshot().Webhooks[WebhookDelivered], b.rec.snapshot().Webhooks[WebhookDelivered]
	require.Equal(t, 40, da+db)
}

// TestWebhookStopPutsAttemptBack: a POST still in flight when Stop's grace
// ends is cut off, counted as abandoned, and its delivery is due again at
// once (for the next gateway), same id.
func TestWebhookStopPutsAttemptBack(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "")
	entered := make(chan struct{}, 1)
	rc.setAnswer(func(_ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	})
	rec := &recorder{}
	st := openStore(t)
	hold, _, _ := gated(okMessage)
	s := newService(t, st, hold, nil, func(c *Config) { c.Observer, c.WebhookClient = rec, &http.Client{Transport: &http.Transport{}} })
	j := submit(t, s, `,"webhook_url":"`+rc.url()+`"`)
	_, err := s.Cancel(context.Background(), j.ID)
	require.NoError(t, err)
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace
	require.NoError(t, s.Stop(ctx))
	require.Equal(t, 1, rec.snapshot().Webhooks[WebhookAbandoned])
	ds, err := st.Deliveries(context.Background(), j.ID)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, jobstore.DeliveryPending, ds[0].State)
	require.False(t, ds[0].NextAttemptAt.After(time.Now()), "due again at once")
}

// TestWebhookHostOnly: the host a log may show.
func TestWebhookHostOnly(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://hooks.example.com:8443/p/a/t/h?token=x": "hooks.example.com:8443",
		"http://user:pass@example.com/x":                 "example.com",
		"::not a url":                                    "(invalid url)",
	} {
		require.Equal(t, want, webhookHost(raw), raw)
	}
}
