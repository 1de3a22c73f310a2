package scenario

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
)

// overheadTarget is the most the gateway may add at p99 for a request it
// admits at once.
const overheadTarget = time.Millisecond

// runOverhead times the same small request sent straight to a zero-latency,
// unlimited mock and through the gateway, interleaved one by one.
func runOverhead(ctx context.Context, o Options) (*Result, error) {
	pairs, warm := 3000, 200
	if o.Quick {
		pairs, warm = 100, 20
	}
	if o.Requests > 0 {
		pairs = o.Requests
	}
	items, err := Generate(Workload{Requests: pairs + warm, Mix: Mix{0, 0, 1, 0}, InputTokensMin: 50, InputTokensMax: 50,
		MaxTokens: 16, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	var stop stopper
	defer func() { _ = stop.stop(ctx) }()
	m, err := startMock(ctx, mock.Config{Seed: o.Seed, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	stop.add(m.Stop)
	gw, err := startGateway(ctx, m.URL(), gatewaySetup{})
	if err != nil {
		return nil, err
	}
	stop.add(gw.Stop)
	client := &http.Client{Transport: newTransport()}
	stop.add(func(context.Context) error { client.CloseIdleConnections(); return nil })
	direct := directSender(client, m.URL())
	via := gatewaySender(client, "http://"+gw.Addr(), 0)
	o.progress("overhead: %d interleaved pairs (direct, via gateway) after %d warm-up pairs", pairs, warm)
	var dLat, gLat []time.Duration
	timeOne := func(send sender, it Item) (time.Duration, error) {
		start := o.Clock.Now()
		status, _, err := send(ctx, it)
		d := o.Clock.Now().Sub(start)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("status %d", status)
		}
		return d, err
	}
	for i, it := range items {
		// Alternate which goes first, so neither always finds the warmer
		// connection or cache.
		order := []sender{direct, via}
		if i%2 == 1 {
			order = []sender{via, direct}
		}
		var lat [2]time.Duration
		for k, send := range order {
			d, err := timeOne(send, it)
			if err != nil {
				return nil, fmt.Errorf("request %d: %w", i, err)
			}
			lat[k] = d
		}
		if i%2 == 1 {
			lat[0], lat[1] = lat[1], lat[0]
		}
		if i >= warm {
			dLat, gLat = append(dLat, lat[0]), append(gLat, lat[1])
		}
	}
	ds, gs := Summarize(dLat), Summarize(gLat)
	r := &Result{Setup: []string{
		"mock: no latency, no limits; gateway: no limits configured, so every request is admitted at once",
		fmt.Sprintf("%d pairs of the same request (50 input tokens, max_tokens 16), direct and via the gateway, interleaved, one at a time; %d warm-up pairs dropped", pairs, warm),
	}}
	r.Tables = append(r.Tables, Table{Header: []string{"path", "requests", "avg", "p50", "p95", "p99", "max"}, Rows: [][]string{
		{"direct", fmt.Sprint(ds.Count), ms(ds.Avg), ms(ds.P50), ms(ds.P95), ms(ds.P99), ms(ds.Max)},
		{"via gateway", fmt.Sprint(gs.Count), ms(gs.Avg), ms(gs.P50), ms(gs.P95), ms(gs.P99), ms(gs.Max)},
		{"added", "", ms(gs.Avg - ds.Avg), ms(gs.P50 - ds.P50), ms(gs.P95 - ds.P95), ms(gs.P99 - ds.P99), ""},
	}})
	added := gs.P99 - ds.P99
	r.figure("direct_p50_ms", float64(ds.P50)/1e6)
	r.figure("direct_p99_ms", float64(ds.P99)/1e6)
	r.figure("gateway_p50_ms", float64(gs.P50)/1e6)
	r.figure("gateway_p99_ms", float64(gs.P99)/1e6)
	r.figure("added_p99_ms", float64(added)/1e6)
	r.check("p99 added by the gateway", fmt.Sprintf("<= %s", ms(overheadTarget)), ms(added), added <= overheadTarget)
	return r, nil
}

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
