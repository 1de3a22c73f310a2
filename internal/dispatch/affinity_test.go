package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// Cache affinity over a 2-key pool on the mock, request by request on the
// fake clock: which key each request goes to, as the answer's key
// fingerprint tells.

// runOne sends r through p's dispatcher and drives the fake clock until
// it is answered.
func runOne(t *testing.T, p *poolRig, r *dispatch.Request) result {
	t.Helper()
	var done atomic.Int32
	inner := doAsync(context.Background(), p.d, r)
	ch := make(chan result, 1)
	go func() { res := <-inner; done.Add(1); ch <- res }()
	p.driveUntil(t, 1, &done)
	res := <-ch
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.resp.StatusCode, res.body)
	return res
}

// affinityRig is a 2-key pool whose engine allows rpm requests a minute
// per key, burst requests deep, in front of a mock that never refuses.
func affinityRig(t *testing.T, proto llm.Protocol, affinity string, rpm int64, burst float64) *poolRig {
	t.Helper()
	return newPoolRig(t, mock.Config{OutputTokens: mock.OutputRange{Min: 5, Max: 20}},
		upcfg.Config{Protocol: proto, APIKeys: keys(2), BurstSeconds: burst * 60 / float64(rpm),
			Limits:      upcfg.Limits{RequestsPerMinute: rpm},
			PromptCache: upcfg.PromptCache{Admission: upcfg.PromptCacheOn, Affinity: affinity}})
}

// TestAffinitySessionMarkers: a session named by Anthropic's
// metadata.user_id, OpenAI's prompt_cache_key or user, or X-Sluice-Session
// (Request.Session, as the front door sets it) stays on one key for all
// its turns, while the sessions spread over both keys; with affinity off
// the same turns follow the room and some session changes key. Three
// sessions take turns, each request sent once the one before it is
// placed, with the fake clock still (the mock answers at once), so the
// keys' buckets (60 a minute, 60 deep) do not refill in between.
func TestAffinitySessionMarkers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		proto  llm.Protocol
		body   func(s, turn int) string
		header bool // the session is Request.Session, not in the body
	}{
		{"anthropic metadata.user_id", llm.Anthropic, func(s, turn int) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":20,"metadata":{"user_id":"user-%d"},"messages":[{"role":"user","content":"turn %d"}]}`, s, turn)
		}, false},
		{"openai prompt_cache_key", llm.OpenAI, func(s, turn int) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","max_tokens":20,"prompt_cache_key":"conv-%d","messages":[{"role":"user","content":"turn %d"}]}`, s, turn)
		}, false},
		{"openai user", llm.OpenAI, func(s, turn int) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","max_tokens":20,"user":"end-user-%d","messages":[{"role":"user","content":"turn %d"}]}`, s, turn)
		}, false},
		{"X-Sluice-Session", llm.Anthropic, func(_, turn int) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":20,"messages":[{"role":"user","content":"turn %d"}]}`, turn)
		}, true},
	}
	const sessions, turns = 3, 4
	run := func(t *testing.T, proto llm.Protocol, affinity string, body func(s, turn int) string, header bool) [sessions]map[string]bool {
		p := affinityRig(t, proto, affinity, 60, 60)
		var placed [sessions]map[string]bool
		for s := range placed {
			placed[s] = map[string]bool{}
		}
		for turn := range turns {
			var done atomic.Int32
			chans := make([]<-chan result, sessions)
			for s := range sessions {
				b := []byte(body(s, turn))
				cost, err := provider.Estimate(proto, b)
				require.NoError(t, err)
				r := &dispatch.Request{Method: http.MethodPost, Path: provider.EndpointChat.Path(proto), Header: http.Header{}, Body: b,
					Cost: cost, Deadline: p.fc.Now().Add(time.Hour)}
				if header {
					r.Session = fmt.Sprintf("session-%d", s)
				}
				inner := doAsync(context.Background(), p.d, r)
				ch := make(chan result, 1)
				go func() { res := <-inner; done.Add(1); ch <- res }()
				chans[s] = ch
				// Placed (or queued) before the next is sent: a known order.
				waitQuiet(t, 20*time.Second, func() bool { sn := p.d.Snapshot(); return sn.InFlight+queued(sn)+int(done.Load()) == s+1 })
			}
			p.driveUntil(t, sessions, &done)
			for s, res := range collect(chans) {
				require.NoError(t, res.err)
				require.Equal(t, http.StatusOK, res.resp.StatusCode)
				placed[s][res.resp.Key] = true
			}
		}
		return placed
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			on := run(t, tt.proto, upcfg.PromptCacheOn, tt.body, tt.header)
			used := map[string]bool{}
			for s, keys := range on {
				require.Len(t, keys, 1, "session %d stays on one key: %v", s, keys)
				for k := range keys {
					used[k] = true
				}
			}
			require.Len(t, used, 2, "the sessions spread over both keys")
			off := run(t, tt.proto, upcfg.PromptCacheOff, tt.body, tt.header)
			moved := false
			for _, keys := range off {
				moved = moved || len(keys) > 1
			}
			require.True(t, moved, "without affinity the room places the turns, and some session changes key: %v", off)
		})
	}
}

// TestAffinityDeadlineEscape: a session's request waits for its key when
// that key will have room before the request's deadline, although the
// other key has room now; when its key cannot admit it before its
// deadline, it goes to the other key at once. Each key allows 6 requests
// a minute, one deep: a request on a key leaves it full again 10 s later.
func TestAffinityDeadlineEscape(t *testing.T) {
	t.Parallel()
	p := affinityRig(t, llm.Anthropic, upcfg.PromptCacheOn, 6, 1)
	req := func(turn int, deadline time.Duration) *dispatch.Request {
		b := []byte(fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":20,"metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"turn %d"}]}`, turn))
		cost, err := provider.Estimate(llm.Anthropic, b)
		require.NoError(t, err)
		return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Header: http.Header{}, Body: b, Cost: cost,
			Deadline: p.fc.Now().Add(deadline)}
	}
	first := runOne(t, p, req(0, time.Hour))
	own := first.resp.Key
	// Its key is empty for about 10 s more; the other is full.
	waited := runOne(t, p, req(1, time.Minute))
	require.Equal(t, own, waited.resp.Key, "it waits for its session's key, which has room before its deadline")
	require.Greater(t, waited.resp.QueueWait, 5*time.Second)
	escaped := runOne(t, p, req(2, 3*time.Second))
	require.NotEqual(t, own, escaped.resp.Key, "its key has no room before its deadline: the other key takes it")
	require.Zero(t, escaped.resp.QueueWait, "at once")
	require.Zero(t, status429(p.mock.Stats()))
}

// TestAffinityPrefixWithoutSession: a request with no session marker
// goes to the key that holds its cached prefix when that key has room
// now, though the other key has more; when that key has none now, it
// goes to the other key at once (only a session waits for its key).
// With affinity off it goes where the room is. Each key allows 6
// requests a minute, three deep (2.94 at the 0.98 margin).
func TestAffinityPrefixWithoutSession(t *testing.T) {
	t.Parallel()
	system := strings.Repeat("You are a careful assistant. ", 200) // ~1,450 tokens: cacheable
	req := func(p *poolRig, q string) *dispatch.Request {
		b := []byte(fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":20,"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":%q}]}`, system, q))
		cost, err := provider.Estimate(llm.Anthropic, b)
		require.NoError(t, err)
		return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Header: http.Header{}, Body: b, Cost: cost,
			Deadline: p.fc.Now().Add(time.Hour)}
	}
	for _, affinity := range []string{upcfg.PromptCacheOn, upcfg.PromptCacheOff} {
		t.Run("affinity "+affinity, func(t *testing.T) {
			t.Parallel()
			p := affinityRig(t, llm.Anthropic, affinity, 6, 3)
			writer := runOne(t, p, req(p, "first"))
			holder := writer.resp.Key
			st := p.mock.Stats()
			require.Positive(t, st.Overall.Cache.WriteTokens, "the first request wrote the prefix on its key")
			// The holder has 1.94 requests of room now, the other 2.94.
			second := runOne(t, p, req(p, "second"))
			if affinity == upcfg.PromptCacheOff {
				require.NotEqual(t, holder, second.resp.Key, "without affinity: the key with the most room")
				return
			}
			require.Equal(t, holder, second.resp.Key, "the key holding its prefix, which has room now")
			require.Positive(t, p.mock.Stats().Overall.Cache.ReadTokens, "and it read the prefix")
			// The holder has none now: no waiting for it.
			third := runOne(t, p, req(p, "third"))
			require.NotEqual(t, holder, third.resp.Key)
			require.Zero(t, third.resp.QueueWait)
		})
	}
}
