package opsview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// answerAtOnce is an upstream that answers every Messages request at once.
type answerAtOnce struct{}

func (answerAtOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	_, _ = rec.WriteString(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}`)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// TestStatusShowsTheUrgentRoom: a real engine at 60 RPM (a 10 s bucket)
// after a critical request, with a batch queued: /v1/status gives, per
// class, what it leaves unused in each bucket for the more urgent
// classes (buckets.requests.urgent_room, the engine's own figures,
// critical omitted: it leaves nothing), and the batch's head waits on
// that room, not on the quota (waiting_on.reason urgent_room, with the
// bucket short of it and when it refills past it).
func TestStatusShowsTheUrgentRoom(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	u := upstream.Config{Name: "claude", Protocol: llm.Anthropic, BaseURL: "http://up.invalid", APIKey: "k",
		Limits: upstream.Limits{RequestsPerMinute: 60}, BurstSeconds: 10}
	d, err := dispatch.New(dispatch.Config{Config: u, Clock: fc, HTTPClient: &http.Client{Transport: answerAtOnce{}}})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	v := New(Config{Clock: fc, Upstreams: []upstream.Config{u}})
	v.Bind(Sources{Engines: map[string]Engine{"claude": d}})

	req := func(c llm.Priority) *dispatch.Request {
		return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Priority: c, Deadline: t0.Add(time.Hour),
			Body: []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`),
			Cost: provider.Cost{Model: "m", InputTokens: 10, OutputTokens: 10}}
	}
	var wg sync.WaitGroup
	do := func(c llm.Priority) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := d.Do(context.Background(), req(c)); err == nil {
				_ = resp.Body.Close()
			}
		}()
	}
	// settled waits until the engine rests (the clock does not move, so
	// nothing changes once the admissions it can make are done).
	settled := func(ok func(dispatch.Snapshot) bool) {
		stable := 0
		var prev [llm.NumPriorities]int
		require.Eventually(t, func() bool {
			runtime.Gosched()
			s := d.Snapshot()
			if ok(s) && s.InFlight == 0 && s.Queued == prev {
				stable++
			} else {
				stable = 0
			}
			prev = s.Queued
			return stable >= 20
		}, 10*time.Second, 100*time.Microsecond)
	}
	do(llm.Critical)
	settled(func(s dispatch.Snapshot) bool { return s.Queued[llm.Critical] == 0 })
	const batch = 10
	for range batch {
		do(llm.Low)
	}
	// The batch takes the bucket down to the room it leaves, and waits.
	settled(func(s dispatch.Snapshot) bool { return s.Queued[llm.Low] > 0 && s.Queued[llm.Low] < batch })

	snap := d.Snapshot()
	st := v.Status(t.Context())
	b := st.Upstreams[0].Buckets["requests"]
	require.Positive(t, b.UrgentRoom["low"], "the batch leaves room for the urgent classes")
	require.InDelta(t, snap.Room[llm.Low][flow.Requests], b.UrgentRoom["low"], 0.05, "the engine's own figure, to a tenth")
	require.Greater(t, b.UrgentRoom["low"], b.UrgentRoom["high"], "high leaves critical less")
	require.NotContains(t, b.UrgentRoom, "critical", "critical leaves nothing")
	require.Less(t, b.Level, b.UrgentRoom["low"]+1.1, "the level stays within a request of the room (both to a tenth)")
	w := st.Upstreams[0].WaitingOn
	require.NotNil(t, w)
	require.Equal(t, dispatch.WaitUrgentRoom, w.Reason, "room for the request, not while leaving the urgent room")
	require.Equal(t, "requests", w.Dimension)
	require.NotNil(t, w.Until)
	require.True(t, w.Until.After(t0), "it refills past the room later")

	body, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(body), `"urgent_room":{`)
	require.True(t, strings.Contains(string(body), `"waiting_on":{"reason":"urgent_room","dimension":"requests"`), "%s", body)

	require.NoError(t, d.Stop(context.Background()))
	wg.Wait()
}
