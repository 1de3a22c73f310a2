package scenario

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/mock"
)

// runMockThroughput measures how many requests per second the mock answers
// on loopback with no latency and no limits, from 32 concurrent clients.
func runMockThroughput(ctx context.Context, o Options) (*Result, error) {
	n, workers := 30000, 32
	if o.Quick {
		n = 500
	}
	if o.Requests > 0 {
		n = o.Requests
	}
	items, err := Generate(Workload{Requests: n, Mix: Mix{0, 0, 1, 0}, InputTokensMin: 50, InputTokensMax: 50, MaxTokens: 16, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	o.progress("mock: %d requests from %d clients", n, workers)
	s, err := runSide(ctx, o, sideConfig{name: "direct", mock: mock.Config{Seed: o.Seed},
		naive: NaiveConfig{Concurrency: workers, MaxAttempts: 1},
		run: func(ctx context.Context, send sender) []Outcome {
			return runClosedLoop(ctx, o.Clock, items, workers, send)
		}})
	if err != nil {
		return nil, err
	}
	rs := summarizeRun(s.outs)
	r := &Result{Setup: []string{
		fmt.Sprintf("mock: no latency, no limits; %d requests (50 input tokens, max_tokens 16) from %d concurrent keep-alive clients", n, workers),
		"client and mock share the machine's cores",
	}}
	r.Tables = append(r.Tables, Table{Header: []string{"requests", "ok", "elapsed", "req/s", "p50", "p99"}, Rows: [][]string{
		{fmt.Sprint(rs.all), fmt.Sprint(rs.ok), secs(rs.elapsed), fmt.Sprintf("%.0f", rs.throughput()), ms(rs.latency.P50), ms(rs.latency.P99)},
	}})
	r.figure("requests_per_s", rs.throughput())
	r.figure("failures", float64(failures(s.outs)))
	return r, nil
}
