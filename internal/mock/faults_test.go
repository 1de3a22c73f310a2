package mock

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/lifecycle"
)

func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	streamBody := `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name    string
		faults  Faults
		openAI  bool
		body    string
		status  int
		want    string // exact JSON body ("" = not checked)
		headers map[string]string
	}{
		{name: "anthropic overload", faults: Faults{OverloadRate: 1, OverloadRetryAfter: 1500 * time.Millisecond, ShouldRetry: true},
			status: 529, want: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":""}`,
			headers: map[string]string{"retry-after": "2", "x-should-retry": "true"}},
		{name: "openai overload", faults: Faults{OverloadRate: 1}, openAI: true, status: 503,
			want:    `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`,
			headers: map[string]string{"retry-after": ""}},
		{name: "anthropic 504", faults: Faults{ErrorRate: 1, ErrorStatuses: []int{504}}, status: 504,
			want: `{"type":"error","error":{"type":"timeout_error","message":"Request timed out"},"request_id":""}`},
		{name: "edge html 502", faults: Faults{ErrorRate: 1, ErrorStatuses: []int{502}, HTMLErrorRate: 1}, status: 502,
			headers: map[string]string{"content-type": "text/html", "request-id": ""}},
		{name: "anthropic spend cap", faults: Faults{SpendCap: true, ShouldRetry: true}, status: 429,
			want:    `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-04-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":""}`,
			headers: map[string]string{"retry-after": "", "x-should-retry": "false"}},
		{name: "openai insufficient quota", faults: Faults{SpendCap: true}, openAI: true, status: 429,
			want: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{name: "anthropic stream error after 2 deltas", faults: Faults{StreamErrorRate: 1, StreamErrorAfter: 2}, body: streamBody, status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Faults: tc.faults, Limits: Limits{RPM: 1}})
			body := tc.body
			if body == "" {
				body = anthropicBody
				if tc.openAI {
					body = openAIBody
				}
			}
			w := anth(s, "k", body)
			if tc.openAI {
				w = oai(s, "k", body)
			}
			require.Equal(t, tc.status, w.Code, w.Body.String())
			for k, v := range tc.headers {
				require.Equal(t, v, w.Header().Get(k), k)
			}
			if tc.want != "" {
				m := decode(t, w.Body.Bytes())
				if _, ok := m["request_id"]; ok {
					m["request_id"] = ""
				}
				got, _ := jsonMarshal(m)
				require.JSONEq(t, tc.want, got)
			}
			if tc.name == "edge html 502" {
				require.Contains(t, w.Body.String(), "<title>502 Bad Gateway</title>")
			}
			if tc.body == streamBody {
				evs := parseSSE(t, w.Body)
				var names []string
				for _, e := range evs {
					names = append(names, e.name)
				}
				require.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "error"}, names)
				require.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, evs[5].data)
				require.Equal(t, int64(2), s.Stats().Overall.Admitted.OutputTokens, "only produced tokens are charged")
				return
			}
			// Faults come before admission: they cost no quota.
			require.NoError(t, s.SetFaults(Faults{}))
			if tc.openAI {
				require.Equal(t, 200, oai(s, "k", body).Code)
			} else {
				require.Equal(t, 200, anth(s, "k", body).Code)
			}
		})
	}
}

func TestOutageWindows(t *testing.T) {
	t.Parallel()
	s, fc := newMock(t, Config{Faults: Faults{Outages: []Outage{{Start: 10 * time.Second, Duration: 5 * time.Second},
		{Start: 20 * time.Second, Duration: time.Second, Status: 503}}}})
	codes := map[time.Duration]int{}
	for at := time.Duration(0); at < 25*time.Second; at += time.Second {
		codes[at] = anth(s, "k", anthropicBody).Code
		fc.Advance(time.Second)
	}
	for at, c := range codes {
		want := 200
		switch {
		case at >= 10*time.Second && at < 15*time.Second:
			want = 529
		case at == 20*time.Second:
			want = 503
		}
		require.Equal(t, want, c, "at %v", at)
	}
}

func TestOverloadStormsAreCorrelatedAndSeeded(t *testing.T) {
	t.Parallel()
	run := func() []bool {
		s, fc := newMock(t, Config{Seed: 7, Faults: Faults{OverloadBurst: 5 * time.Second, OverloadGap: 20 * time.Second}})
		var out []bool
		for range 600 {
			out = append(out, anth(s, "k", anthropicBody).Code == 529)
			fc.Advance(500 * time.Millisecond)
		}
		return out
	}
	a, b := run(), run()
	require.Equal(t, a, b, "same seed, same storms")
	over, runs := 0, 0
	for i, x := range a {
		if x {
			over++
			if i == 0 || !a[i-1] {
				runs++
			}
		}
	}
	require.Greater(t, over, 0)
	require.Greater(t, float64(over)/float64(runs), 3.0, "overloads come in bursts, not alone")
	require.Less(t, over, len(a)/2)
}

func TestConnectionReset(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Faults: Faults{ResetRate: 1}})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	req.Header.Set("x-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "the connection was reset")
	require.Equal(t, int64(1), s.Stats().Overall.ByStatus["reset"])
}

func TestStatsAndReset(t *testing.T) {
	t.Parallel()
	s, fc := newMock(t, Config{Limits: Limits{RPM: 2}, OutputTokens: OutputRange{Min: 3, Max: 3}})
	for range 3 {
		anth(s, "a", anthropicBody)
	}
	fc.Advance(time.Second)
	anth(s, "b", anthropicBody)
	call(s, "POST", "/v1/messages", nil, anthropicBody) // 401, no key
	w := call(s, "GET", "/mock/stats", nil, "")
	require.Equal(t, 200, w.Code)
	var st Stats
	require.NoError(t, jsonUnmarshal(w.Body.Bytes(), &st))
	require.Equal(t, s.Stats(), st)
	require.Equal(t, map[string]int64{"200": 3, "429": 1, "401": 1}, st.Overall.ByStatus)
	require.Equal(t, Counts{Requests: 3, InputTokens: 9, OutputTokens: 9, Tokens: 18}, st.Overall.Admitted)
	require.Equal(t, Counts{Requests: 2, InputTokens: 6, OutputTokens: 6, Tokens: 12}, st.Keys["a"].Admitted)
	require.Equal(t, int64(1), st.Overall.PeakInFlight)
	require.Equal(t, t0, *st.Overall.FirstAdmission)
	require.Equal(t, t0.Add(time.Second), *st.Overall.LastAdmission)
	require.Equal(t, 429, anth(s, "a", anthropicBody).Code)
	require.Equal(t, 200, call(s, "POST", "/mock/reset", nil, "").Code)
	require.Equal(t, 200, anth(s, "a", anthropicBody).Code, "buckets refilled")
	require.Equal(t, map[string]int64{"200": 1}, s.Stats().Overall.ByStatus)
}

func TestPeakInFlight(t *testing.T) {
	t.Parallel()
	s, fc := newMock(t, Config{TTFT: time.Second})
	done := make(chan int, 4)
	for range 4 {
		go func() { done <- anth(s, "k", anthropicBody).Code }()
	}
	require.True(t, fc.WaitForTimers(4, 5*time.Second))
	require.Equal(t, int64(4), s.Stats().Overall.InFlight)
	fc.Advance(time.Second)
	for range 4 {
		require.Equal(t, 200, <-done)
	}
	st := s.Stats().Overall
	require.Equal(t, int64(4), st.PeakInFlight)
	require.Equal(t, int64(0), st.InFlight)
}

func TestConfigValidationAndYAML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"valid", "listen: 127.0.0.1:0\npreset: anthropic-tier1\nlimits: {rpm: 10}\nburst_seconds: 6\nttft: 200ms\nfaults:\n  overload_rate: 0.1\n  outages: [{start: 30s, duration: 10s}]\n", ""},
		{"empty file", "", ""},
		{"unknown field", "rpm: 5\n", "field rpm not found"},
		{"bad rate", "faults: {overload_rate: 1.5}\n", "faults.overload_rate must be in [0, 1]"},
		{"bad mode", "otpm_mode: sometimes\n", "otpm_mode must be"},
		{"bad preset", "preset: tier9\n", "preset: unknown preset \"tier9\""},
		{"negative limit", "limits: {tpm: -1}\n", "limits.tpm must be >= 0"},
		{"storm half set", "faults: {overload_burst: 5s}\n", "faults.overload_burst and faults.overload_gap"},
		{"bad outage", "faults: {outages: [{start: 1s, duration: 0s}]}\n", "faults.outages[0]"},
		{"output range", "output_tokens: {min: 10, max: 5}\n", "output_tokens.max (5) must be >= output_tokens.min (10)"},
		{"flex factor", "flex_latency_factor: 0.5\n", "flex_latency_factor must be finite and >= 1"},
		{"flex rate", "faults: {flex_unavailable_rate: 2}\n", "faults.flex_unavailable_rate must be in [0, 1]"},
		{"count tokens limit", "limits: {count_tokens_rpm: -1}\n", "limits.count_tokens_rpm must be >= 0"},
		{"bucket below one request", "preset: anthropic-tier1\nburst_seconds: 1\n", "burst_seconds 1 holds 0.83 requests at rpm 50, so every request would get 429: use at least 1.2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "mock.yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.yaml), 0o600))
			cfg, err := LoadConfig(p)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			s, err := New(cfg)
			require.NoError(t, err)
			if tc.name == "valid" {
				require.Equal(t, Limits{RPM: 10, ITPM: 30_000, OTPM: 8_000, CountTokensRPM: 100}, s.Limits(), "flags-style override of a preset")
				require.Equal(t, 200*time.Millisecond, cfg.TTFT)
				require.Equal(t, 529, s.Faults().Outages[0].Status)
			}
		})
	}
	_, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "reading mock config")
	require.Error(t, (&Server{faults: newFaultEngine(Faults{}, 0, t0)}).SetFaults(Faults{ErrorRate: -1}))
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()), "stop before start")
	require.Empty(t, s.URL())
	require.ErrorIs(t, s.Start(t.Context()), lifecycle.ErrStopped, "a server stopped before start never starts")
	s, err = New(Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	require.ErrorIs(t, s.Start(t.Context()), lifecycle.ErrStarted)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, s.URL())
	require.NoError(t, s.Stop(context.Background()))
	require.NoError(t, s.Stop(context.Background()), "idempotent")
}
