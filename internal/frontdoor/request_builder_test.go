package frontdoor_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

const (
	messageBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	chatStream  = `{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func prio(p llm.Priority) *llm.Priority { return &p }

func TestBuild(t *testing.T) {
	t.Parallel()
	web := frontdoor.Caller{Name: "web", DefaultPriority: llm.High, MaxPriority: llm.High}
	for _, tc := range []struct {
		name         string
		caller       frontdoor.Caller
		header       map[string]string
		override     frontdoor.Override
		wantPriority llm.Priority
		wantClient   string
		wantDeadline time.Time
		wantSession  string
		wantErr      string
	}{
		{name: "in-process default", caller: frontdoor.InProcess, wantPriority: llm.Normal},
		{name: "caller default", caller: web, wantPriority: llm.High, wantClient: "web"},
		{name: "header lower", caller: web, header: map[string]string{"X-Priority": "low"}, wantPriority: llm.Low, wantClient: "web"},
		{name: "header capped", caller: web, header: map[string]string{"X-Priority": "0"}, wantPriority: llm.High, wantClient: "web"},
		{name: "override wins", caller: frontdoor.InProcess, header: map[string]string{"X-Priority": "low"},
			override: frontdoor.Override{Priority: prio(llm.Critical), Client: "app"}, wantPriority: llm.Critical, wantClient: "app"},
		{name: "override capped", caller: web, override: frontdoor.Override{Priority: prio(llm.Critical)}, wantPriority: llm.High, wantClient: "web"},
		{name: "invalid override ignored", caller: frontdoor.InProcess, override: frontdoor.Override{Priority: prio(9)}, wantPriority: llm.Normal},
		{name: "bad priority", caller: frontdoor.InProcess, header: map[string]string{"X-Priority": "urgent"}, wantErr: "X-Priority header"},
		{name: "bad priority even overridden", caller: frontdoor.InProcess, header: map[string]string{"X-Priority": "urgent"},
			override: frontdoor.Override{Priority: prio(llm.High)}, wantErr: "X-Priority header"},
		{name: "duration deadline", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "45s"},
			wantPriority: llm.Normal, wantDeadline: t0.Add(45 * time.Second)},
		{name: "rfc3339 deadline", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "2026-03-01T13:00:00Z"},
			wantPriority: llm.Normal, wantDeadline: t0.Add(time.Hour)},
		{name: "stainless timeout", caller: frontdoor.InProcess, header: map[string]string{"X-Stainless-Timeout": "600"},
			wantPriority: llm.Normal, wantDeadline: t0.Add(10 * time.Minute)},
		{name: "sluice deadline wins", caller: frontdoor.InProcess, header: map[string]string{"X-Stainless-Timeout": "600", "X-Sluice-Deadline": "5s"},
			wantPriority: llm.Normal, wantDeadline: t0.Add(5 * time.Second)},
		{name: "override deadline wins", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "5s"},
			override: frontdoor.Override{Deadline: t0.Add(time.Minute)}, wantPriority: llm.Normal, wantDeadline: t0.Add(time.Minute)},
		{name: "bad stainless ignored", caller: frontdoor.InProcess, header: map[string]string{"X-Stainless-Timeout": "soon"}, wantPriority: llm.Normal},
		{name: "bad deadline", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "tomorrow"}, wantErr: "X-Sluice-Deadline header"},
		{name: "negative deadline", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "-5s"}, wantErr: "must be positive"},
		{name: "deadline already past", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": "2026-03-01T11:00:00Z"}, wantErr: "already past"},
		{name: "deadline now", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Deadline": t0.Format(time.RFC3339)}, wantErr: "already past"},
		{name: "session header", caller: frontdoor.InProcess, header: map[string]string{"X-Sluice-Session": "  conv-42 "},
			wantPriority: llm.Normal, wantSession: "conv-42"},
		{name: "override deadline already past", caller: frontdoor.InProcess, override: frontdoor.Override{Deadline: t0.Add(-time.Second)}, wantErr: "already past"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Api-Key": {"leak"}, "Anthropic-Version": {"2023-06-01"}}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			req, rerr := frontdoor.Build(frontdoor.Input{Protocol: llm.Anthropic, Path: "/v1/messages?beta=true", Header: h,
				Body: []byte(messageBody), Caller: tc.caller, Override: tc.override, Now: t0})
			if tc.wantErr != "" {
				require.Nil(t, req)
				require.NotNil(t, rerr)
				require.Equal(t, 400, rerr.Status)
				require.Equal(t, "invalid_request_error", rerr.Type)
				require.Contains(t, rerr.Message, tc.wantErr)
				return
			}
			require.Nil(t, rerr)
			require.Equal(t, http.MethodPost, req.Method)
			require.Equal(t, "/v1/messages?beta=true", req.Path)
			require.Equal(t, tc.wantPriority, req.Priority)
			require.Equal(t, tc.wantClient, req.Client)
			require.True(t, tc.wantDeadline.Equal(req.Deadline), "deadline %v, want %v", req.Deadline, tc.wantDeadline)
			require.Equal(t, messageBody, string(req.Body))
			require.Equal(t, "claude-sonnet-4-5", req.Cost.Model)
			require.False(t, req.UsageInjected)
			require.Equal(t, "2023-06-01", req.Header.Get("Anthropic-Version"))
			require.Equal(t, tc.wantSession, req.Session, "X-Sluice-Session names the session for cache affinity")
			for _, k := range []string{"Api-Key", "X-Priority", "X-Sluice-Deadline", "X-Sluice-Session"} {
				require.Empty(t, req.Header.Values(k), k)
			}
			require.Equal(t, tc.header["X-Stainless-Timeout"], req.Header.Get("X-Stainless-Timeout"), "the SDK's own headers are forwarded")
		})
	}
}

func TestBuildRejectsInvalidBody(t *testing.T) {
	t.Parallel()
	_, rerr := frontdoor.Build(frontdoor.Input{Protocol: llm.Anthropic, Path: "/v1/messages", Body: []byte(`{"model":"m","messages":[]}`), Caller: frontdoor.InProcess, Now: t0})
	require.NotNil(t, rerr)
	require.Equal(t, 400, rerr.Status)
	require.Equal(t, "invalid_request_error", rerr.Type)
}

func TestBuildAsksStreamsForUsage(t *testing.T) {
	t.Parallel()
	req, rerr := frontdoor.Build(frontdoor.Input{Protocol: llm.OpenAI, Path: "/v1/chat/completions", Body: []byte(chatStream), Caller: frontdoor.InProcess, Now: t0})
	require.Nil(t, rerr)
	require.True(t, req.UsageInjected)
	require.Contains(t, string(req.Body), `"include_usage":true`)

	asked := strings.Replace(chatStream, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	req, rerr = frontdoor.Build(frontdoor.Input{Protocol: llm.OpenAI, Path: "/v1/chat/completions", Body: []byte(asked), Caller: frontdoor.InProcess, Now: t0})
	require.Nil(t, rerr)
	require.False(t, req.UsageInjected, "a caller that asked for usage keeps its chunk")
	require.Equal(t, asked, string(req.Body))
}

// FuzzBuildHeaders: whatever the client sends in X-Priority,
// X-Sluice-Deadline, X-Stainless-Timeout and one more header, Build either
// refuses with a 400 invalid_request_error or returns a request with a
// valid priority within the caller's cap and no header that must not go
// upstream.
func FuzzBuildHeaders(f *testing.F) {
	f.Add("high", "30s", "600", "Api-Key", "k")
	f.Add("3", "2026-03-01T13:00:00Z", "", "Connection", "X-Foo")
	f.Add("urgent", "-1s", "1e9", "X-Sluice-Anything", "v")
	f.Add("", "tomorrow", "NaN", "x-api-key", "")
	f.Add("", "", "", "x-api-key", "k")
	f.Add("", "", "", "connection", "anthropic-beta")
	f.Add(" Critical ", "1h", "0.5", "Proxy-Authorization", "Basic x")
	f.Fuzz(func(t *testing.T, priority, deadline, stainless, name, value string) {
		h := http.Header{}
		for k, v := range map[string]string{"X-Priority": priority, "X-Sluice-Deadline": deadline, "X-Stainless-Timeout": stainless} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		if name != "" {
			h[name] = []string{value}
		}
		caller := frontdoor.Caller{Name: "c", DefaultPriority: llm.Normal, MaxPriority: llm.High}
		req, rerr := frontdoor.Build(frontdoor.Input{Protocol: llm.Anthropic, Path: "/v1/messages", Header: h,
			Body: []byte(messageBody), Caller: caller, Now: t0})
		if rerr != nil {
			require.Nil(t, req)
			require.Equal(t, 400, rerr.Status)
			require.Equal(t, "invalid_request_error", rerr.Type)
			return
		}
		require.True(t, req.Priority.Valid())
		require.GreaterOrEqual(t, req.Priority, llm.High)
		if strings.TrimSpace(deadline) == "" && !req.Deadline.IsZero() {
			require.True(t, req.Deadline.After(t0), "a deadline from X-Stainless-Timeout is in the future")
		}
		for k := range req.Header {
			ck := http.CanonicalHeaderKey(k)
			require.NotContains(t, []string{"Authorization", "X-Api-Key", "Api-Key", "Proxy-Authorization", "X-Priority", "Connection",
				"Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host", "Accept-Encoding"}, ck)
			require.False(t, strings.HasPrefix(ck, "X-Sluice-"), ck)
		}
	})
}
