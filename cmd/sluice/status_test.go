package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/server"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// statusGateway is a gateway on the mock provider, with one request served.
func statusGateway(t *testing.T) string {
	t.Helper()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Limits: mock.Limits{RPM: 600}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := server.New(server.Config{Store: server.StoreNone, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}}}, server.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/claude/v1/messages",
		strings.NewReader(`{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return base
}

func TestStatusAndBreakerCommands(t *testing.T) {
	t.Parallel()
	base := statusGateway(t)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(t.Context(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := run("status", "--server", base)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "claude (anthropic)  breaker closed  nothing waits")
	require.Regexp(t, `queued\s+critical 0, high 0, normal 0, low 0`, out)
	// 600 RPM × the adaptive margin (0.995 while no 429 is seen).
	require.Regexp(t, `requests\s+used [0-9.]+ of [0-9.]+, available [0-9.]+, limit 597/min, provider: [0-9]+ left of 600`, out)
	require.Contains(t, out, "default")

	code, out, errOut = run("upstream", "breaker", "open", "claude", "--server", base)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "upstream claude: breaker closed → open (held open until 'sluice upstream breaker reset claude')\n", out)
	code, out, _ = run("status", "--server", base)
	require.Equal(t, 0, code)
	require.Contains(t, out, "breaker open (held by an operator)")
	require.Contains(t, out, "closed→open (operator open)")
	code, out, errOut = run("upstream", "breaker", "reset", "claude", "--server", base)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "upstream claude: breaker open → closed\n", out)

	code, _, errOut = run("upstream", "breaker", "reset", "nope", "--server", base)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown upstream nope")
	code, _, errOut = run("upstream", "breaker", "explode", "claude")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "want breaker reset|open NAME")

	code, out, _ = run("status", "--json", "--server", base)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"waiting_on": null`)

	// --watch redraws until interrupted.
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	var wout, werr bytes.Buffer
	require.Equal(t, 0, runMain(ctx, []string{"status", "--watch", "--interval", "50ms", "--server", base}, &wout, &werr), werr.String())
	require.GreaterOrEqual(t, strings.Count(wout.String(), "sluice status  "), 2)
}

// TestStatusSaysWhatWaits: the upstream block never says "nothing waits"
// while something is queued, names the client limit that holds a queue of
// held clients only, lists each held client and the upstream's fallbacks.
func TestStatusSaysWhatWaits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	until := now.Add(2 * time.Second)
	limit := "client acme's requests_per_minute (30) on claude"
	upstream := func(edit func(u *opsview.UpstreamStatus)) opsview.StatusResponse {
		u := opsview.UpstreamStatus{Name: "claude", Protocol: llm.Anthropic, Breaker: "closed",
			Queued: map[string]int{"critical": 0, "high": 0, "normal": 0, "low": 0}, OldestWait: map[string]float64{}}
		edit(&u)
		return opsview.StatusResponse{Time: now, Upstreams: []opsview.UpstreamStatus{u}}
	}
	for _, tc := range []struct {
		name    string
		st      opsview.StatusResponse
		want    []string
		notWant []string
	}{
		{"nothing queued", upstream(func(*opsview.UpstreamStatus) {}), []string{"breaker closed  nothing waits"}, []string{"held by client limit", "fallbacks"}},
		{"only held clients queued", upstream(func(u *opsview.UpstreamStatus) {
			u.Queued["high"] = 1
			u.WaitingOn = &opsview.WaitingOn{Reason: "client_limit", Client: "acme", Limit: limit, Until: &until}
			u.Held = []opsview.HeldClient{{Client: "acme", Priority: "high", Queued: 1, Limit: limit, Until: &until}}
		}), []string{
			"breaker closed  waiting on client_limit (" + limit + ") until " + until.Local().Format(time.TimeOnly) + ", in 2s",
			"held by client limit  acme high: 1 queued, " + limit + " until " + until.Local().Format(time.TimeOnly) + ", in 2s",
		}, []string{"nothing waits"}},
		{"another client's limit, cut for the caller", upstream(func(u *opsview.UpstreamStatus) {
			u.Queued["low"] = 2
			u.WaitingOn = &opsview.WaitingOn{Reason: "client_limit"}
		}), []string{"waiting on client_limit (another client's)"}, []string{"nothing waits", "acme"}},
		{"a concurrency hold lifts when a request ends", upstream(func(u *opsview.UpstreamStatus) {
			u.Queued["normal"] = 1
			u.WaitingOn = &opsview.WaitingOn{Reason: "client_limit", Client: "acme", Limit: "client acme's max_concurrency (1)"}
			u.Held = []opsview.HeldClient{{Client: "acme", Priority: "normal", Queued: 1, Limit: "client acme's max_concurrency (1)"}}
		}), []string{"acme normal: 1 queued, client acme's max_concurrency (1) until one of its requests ends"}, []string{"nothing waits"}},
		{"queued, about to be admitted", upstream(func(u *opsview.UpstreamStatus) { u.Queued["critical"] = 3 }),
			[]string{"breaker closed  3 queued, being admitted"}, []string{"nothing waits"}},
		{"fallbacks listed", upstream(func(u *opsview.UpstreamStatus) { u.Fallbacks = []string{"claude-b", "claude-c"} }),
			[]string{"fallbacks  claude-b, claude-c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			printStatus(&b, "http://gw", tc.st)
			for _, w := range tc.want {
				require.Contains(t, b.String(), w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, b.String(), w)
			}
		})
	}
}

// TestStatusShowsSpend: `sluice status` with an admin key prints a row per
// client with a budget or spend: what it spent today, this month and in
// all, what is left of each window's budget ("-" without one) and what
// its requests in flight hold, from the gateway's own ledger.
func TestStatusShowsSpend(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 40, Max: 40}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`listen: 127.0.0.1:0
store: none
upstreams:
  - {name: claude, protocol: anthropic, base_url: `+m.URL()+`, api_key: sk-up}
prices:
  models:
    claude-x: {input: 100, output: 1000}
clients:
  - {name: team, key: ck-team-0123456789, budget: {day: 1, total: 5}}
  - {name: ops, key: ck-ops-0123456789, role: admin}
`), 0o600))
	cfg, err := server.LoadConfig(cfgPath, os.LookupEnv)
	require.NoError(t, err)
	g, err := server.New(cfg, server.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	for range 3 {
		req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/claude/v1/messages",
			strings.NewReader(`{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", "ck-team-0123456789")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// What the provider billed, priced here (not by the gateway's ledger).
	st := m.Stats().Overall
	spent := (float64(st.Admitted.InputTokens)*100 + float64(st.Admitted.OutputTokens)*1000) / 1e6
	require.EqualValues(t, 120, st.Admitted.OutputTokens)
	money := func(v float64) string { return fmt.Sprintf(`\$%.4f`, v) }

	var out, errOut bytes.Buffer
	require.Equal(t, 0, runMain(t.Context(), []string{"status", "--server", base, "--key", "ck-ops-0123456789"}, &out, &errOut), errOut.String())
	require.Regexp(t, `CLIENT\s+SPENT TODAY\s+LEFT TODAY\s+SPENT MONTH\s+LEFT MONTH\s+SPENT TOTAL\s+LEFT TOTAL\s+IN FLIGHT\n`, out.String())
	require.Regexp(t, `(?m)^team\s+`+money(spent)+`\s+`+money(1-spent)+` of \$1\.0000\s+`+money(spent)+`\s+-\s+`+
		money(spent)+`\s+`+money(5-spent)+` of \$5\.0000\s+\$0\.0000$`, out.String())
	require.NotRegexp(t, `(?m)^ops\s+\$`, out.String(), "a client with no budget and no spend has no row")
}
