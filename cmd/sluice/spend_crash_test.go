package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/mock"
)

// TestBudgetSurvivesSIGKILL runs `sluice serve` on a SQLite file with a
// client whose day budget is $0.50, streams through it four at a time,
// SIGKILLs it with four streams in flight and the spend of the finished
// ones settled moments before, restarts it on the same file and streams
// on until the budget refuses. What the provider (the mock) billed for
// all of it stays within one request's worst case of the budget: the
// restarted gateway charged the streams cut by the kill at their worst
// case, and lost none of the settled spend (issue 24: before, it
// forgot both and admitted the budget again).
//
// SLUICE_CRASHTEST_BINARY runs another build of sluice (e.g. the code
// before the fix); the test then only reports what the provider billed.
func TestBudgetSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kills and restarts a gateway process")
	}
	binary := os.Getenv("SLUICE_CRASHTEST_BINARY")
	// 400 output tokens a stream, 2 ms each: 0.8 s. claude-x at $10 and
	// $100 per million tokens: about $0.040 a stream, $0.050 its worst
	// case (max_tokens 500).
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 400, Max: 400},
		PerToken: 2 * time.Millisecond, Seed: 7})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	const (
		budget = 0.50
		worst  = 0.0503 // 500 output tokens and the input estimate
	)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: sqlite:%s
clients:
  - {name: team, key: ck-team, budget: {day: %v}}
  - {name: ops, key: ck-ops, role: admin}
prices:
  models:
    claude-x: {input: 10, output: 100}
upstreams:
  - name: claude
    protocol: anthropic
    base_url: %s
    api_key: sk-up
`, filepath.Join(dir, "sluice.db"), budget, m.URL()), 0o600))

	// stream sends one stream and reads it to its end: its status and
	// whether a refusal says not to retry (exhausted, not pending).
	stream := func(base string) (status int, final bool, err error) {
		body := `{"model":"claude-x","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"write at length"}]}`
		req, err := http.NewRequest(http.MethodPost, base+"/claude/v1/messages", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("x-api-key", "ck-team")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, false, err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return resp.StatusCode, false, err
		}
		return resp.StatusCode, resp.StatusCode == http.StatusPaymentRequired || resp.Header.Get("x-should-retry") == "false", nil
	}

	// The first gateway: four streams at a time until six have ended,
	// then SIGKILL (four in flight).
	a := startGateway(t, binary, cfg)
	ended := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				status, _, err := stream(a.base)
				if err != nil {
					return // the gateway is gone
				}
				require.Equal(t, http.StatusOK, status)
				ended <- struct{}{}
			}
		})
	}
	for range 6 {
		<-ended
	}
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	wg.Wait()
	<-a.done
	first := len(ended) + 6

	// The second, on the same file: streams until the budget refuses.
	b := startGateway(t, binary, cfg)
	var mu sync.Mutex
	served := 0
	for range 4 {
		wg.Go(func() {
			for range 40 {
				status, final, err := stream(b.base)
				require.NoError(t, err)
				if status == http.StatusOK {
					mu.Lock()
					served++
					mu.Unlock()
					continue
				}
				require.Contains(t, []int{http.StatusTooManyRequests, http.StatusPaymentRequired}, status)
				if final {
					return
				}
				time.Sleep(200 * time.Millisecond) // pending: the streams in flight may leave room
			}
			t.Error("never refused")
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 10*time.Second, 10*time.Millisecond)
	st := m.Stats().Overall
	billed := (float64(st.Admitted.InputTokens)*10 + float64(st.Admitted.OutputTokens)*100) / 1e6
	var status struct {
		Spend struct {
			Clients []struct {
				Client string `json:"client"`
				Day    struct {
					SpentUSD float64 `json:"spent_usd"`
				} `json:"day"`
			} `json:"clients"`
		} `json:"spend"`
	}
	req, err := http.NewRequest(http.MethodGet, b.base+"/v1/status", nil)
	require.NoError(t, err)
	req.Header.Set("x-api-key", "ck-ops") // the spend section is the admin's
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&status))
	require.NoError(t, resp.Body.Close())
	require.Len(t, status.Spend.Clients, 1)
	t.Logf("$%.2f day budget: %d streams ended before the SIGKILL, %d served after the restart; the provider billed $%.4f (%+.1f %%) for %d requests; the restarted budget counts $%.4f",
		budget, first, served, billed, 100*(billed-budget)/budget, st.Admitted.Requests, status.Spend.Clients[0].Day.SpentUSD)
	if binary != "" {
		return // measuring another build
	}
	require.LessOrEqual(t, billed, budget+worst, "over-spent by at most one request's worst case")
	require.GreaterOrEqual(t, status.Spend.Clients[0].Day.SpentUSD, billed-1e-6, "the budget counts at least what was billed")
}

type gateway struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

// startGateway runs `sluice serve --config cfg` in a process of its own:
// binary, or this test binary as sluice (memServeEnv). It serves until
// the test ends (its stdin closes) or it is killed.
func startGateway(t *testing.T, binary, cfg string) *gateway {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memServeEnv+"=1", memServeArgs+"="+strings.Join([]string{"serve", "--config", cfg}, "\n"))
	if binary != "" {
		cmd = exec.Command(binary, "serve", "--config", cfg)
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	g := &gateway{cmd: cmd, done: make(chan struct{})}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "sluice listening on "); ok {
			g.base = strings.TrimSpace(rest)
			break
		}
	}
	require.NotEmpty(t, g.base, "the gateway did not start")
	go func() {
		for lines.Scan() {
		}
		_ = cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // a graceful stop; a killed gateway has ended already
		select {
		case <-g.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-g.done
		}
	})
	return g
}
