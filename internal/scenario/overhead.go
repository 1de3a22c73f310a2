package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// Overhead scenario defaults.
var (
	// OverheadRatesDefault are the open-loop arrival rates (requests per
	// second) the overhead scenario measures.
	OverheadRatesDefault = []int{500, 1000, 2000}
)

const (
	// OverheadRoundsDefault is how many rounds each system runs per rate;
	// the figures are the medians over rounds.
	OverheadRoundsDefault = 3
	// OverheadRoundDefault is how long one round sends.
	OverheadRoundDefault = 5 * time.Second
)

// Overhead systems, in the order of the report.
const (
	sysDirect = "direct"
	sysBare   = "bare proxy"
	sysSluice = "sluice"
)

// overheadSaturatedMs is the direct calls' median latency above which a
// rate is reported as saturating the machine.
const overheadSaturatedMs = 5.0

// overheadBodies is how many distinct request bodies the load cycles
// through (built once, so the load generator's cost does not vary).
const overheadBodies = 64

// overheadSystem is one thing the load is sent to.
type overheadSystem struct {
	name   string
	url    string
	client *http.Client
}

// roundResult is one system's round at one rate.
type roundResult struct {
	lat    []time.Duration
	errors int
	sent   int
	cpu    time.Duration // process CPU (user + system) during the round
}

// runOverhead measures what the gateway adds over calling the provider
// directly, side by side with a bare httputil.ReverseProxy in the same run:
// open-loop load at each rate, the systems taking turns round by round,
// medians over rounds.
func runOverhead(ctx context.Context, o Options) (*Result, error) {
	rates := slices.Clone(o.Rates)
	if len(rates) == 0 {
		rates = OverheadRatesDefault
		if o.Quick {
			rates = []int{200}
		}
	}
	rounds := o.Rounds
	if rounds == 0 {
		rounds = OverheadRoundsDefault
		if o.Quick {
			rounds = 1
		}
	}
	roundLen := o.Round
	if roundLen == 0 {
		roundLen = OverheadRoundDefault
		if o.Quick {
			roundLen = 300 * time.Millisecond
		}
	}
	items, err := Generate(Workload{Requests: overheadBodies, Mix: Mix{0, 0, 1, 0}, InputTokensMin: 400, InputTokensMax: 600,
		MaxTokens: 64, OpenAIShare: 1, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	bodies := make([][]byte, len(items))
	for i, it := range items {
		bodies[i] = it.Body()
	}
	path := items[0].Path()

	var stop stopper
	defer func() { _ = stop.stop(ctx) }()
	m, err := startMock(ctx, mock.Config{Seed: o.Seed, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	stop.add(m.Stop)
	gw, err := startGateway(ctx, m.URL(), gatewaySetup{openAIUnlimited: true})
	if err != nil {
		return nil, err
	}
	stop.add(gw.Stop)
	bare, err := startBareProxy(m.URL())
	if err != nil {
		return nil, err
	}
	stop.add(bare.stop)
	systems := []overheadSystem{
		{name: sysDirect, url: m.URL() + path},
		{name: sysBare, url: bare.url + path},
		{name: sysSluice, url: "http://" + gw.Addr() + "/" + openAIUpstream + path},
	}
	for i := range systems {
		systems[i].client = &http.Client{Transport: newTransport()}
		c := systems[i].client
		stop.add(func(context.Context) error { c.CloseIdleConnections(); return nil })
	}

	// Warm up every system (connections, caches, the gateway's buckets).
	o.progress("overhead: warm-up, %d req/s for %v per system", rates[0], min(roundLen, time.Second))
	for _, s := range systems {
		r := overheadRound(ctx, o.Clock, s, bodies, rates[0], min(roundLen, time.Second))
		if r.errors > 0 {
			return nil, fmt.Errorf("warm-up of %s: %d of %d requests failed", s.name, r.errors, r.sent)
		}
	}

	res := &Result{Setup: []string{
		"mock: no latency, no limits, OpenAI chat completions (400-600 input tokens, max_tokens 64); gateway: one openai upstream, no limits configured",
		fmt.Sprintf("bare proxy: httputil.ReverseProxy, FlushInterval -1, the same transport (%d idle connections per host) as the gateway", newTransport().MaxIdleConnsPerHost),
		fmt.Sprintf("open loop at %s req/s: %d rounds of %v per system and rate, the systems taking turns (order rotated every round); figures are medians over rounds",
			joinInts(rates), rounds, roundLen),
		"added = the system's latency percentile minus the direct call's in the same round; CPU = process user+system time (getrusage) per 1,000 requests, load generator and mock included; added CPU = minus the direct round's",
		"load generator, mock and both proxies share the machine's cores",
	}}
	table := Table{Header: []string{"req/s", "system", "p50", "p99", "added p50", "added p99", "CPU s/1k", "added CPU s/1k", "failed"}}
	type agg struct{ p50, p99, addP50, addP99, cpu, addCPU []float64 }
	for _, rate := range rates {
		per := map[string]*agg{}
		failed := map[string]int{}
		for _, s := range systems {
			per[s.name] = &agg{}
		}
		for round := range rounds {
			o.progress("overhead: %d req/s, round %d of %d", rate, round+1, rounds)
			got := map[string]roundResult{}
			for k := range systems {
				s := systems[(k+round)%len(systems)]
				got[s.name] = overheadRound(ctx, o.Clock, s, bodies, rate, roundLen)
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			d := Summarize(got[sysDirect].lat)
			dCPU := cpuPer1k(got[sysDirect])
			for _, s := range systems {
				r := got[s.name]
				sum := Summarize(r.lat)
				a := per[s.name]
				a.p50 = append(a.p50, msf(sum.P50))
				a.p99 = append(a.p99, msf(sum.P99))
				a.addP50 = append(a.addP50, msf(sum.P50-d.P50))
				a.addP99 = append(a.addP99, msf(sum.P99-d.P99))
				a.cpu = append(a.cpu, cpuPer1k(r))
				a.addCPU = append(a.addCPU, cpuPer1k(r)-dCPU)
				failed[s.name] += r.errors
			}
		}
		for _, s := range systems {
			a := per[s.name]
			row := []string{fmt.Sprint(rate), s.name, msStr(median(a.p50)), msStr(median(a.p99)), "", "",
				fmt.Sprintf("%.3f", median(a.cpu)), "", fmt.Sprint(failed[s.name])}
			if s.name != sysDirect {
				row[4], row[5], row[7] = msStr(median(a.addP50)), msStr(median(a.addP99)), fmt.Sprintf("%.3f", median(a.addCPU))
			}
			table.Rows = append(table.Rows, row)
			key := strings.ReplaceAll(s.name, " proxy", "")
			res.figure(fmt.Sprintf("%s_p50_ms_%d", key, rate), median(a.p50))
			res.figure(fmt.Sprintf("%s_p99_ms_%d", key, rate), median(a.p99))
			res.figure(fmt.Sprintf("%s_cpu_s_per_1k_%d", key, rate), median(a.cpu))
			res.figure(fmt.Sprintf("%s_failed_%d", key, rate), float64(failed[s.name]))
			if s.name != sysDirect {
				res.figure(fmt.Sprintf("%s_added_p50_ms_%d", key, rate), median(a.addP50))
				res.figure(fmt.Sprintf("%s_added_p99_ms_%d", key, rate), median(a.addP99))
				res.figure(fmt.Sprintf("%s_added_cpu_s_per_1k_%d", key, rate), median(a.addCPU))
			}
		}
		if d := median(per[sysDirect].p50); d > overheadSaturatedMs {
			res.Notes = append(res.Notes, fmt.Sprintf("at %d req/s the direct calls' median is %s: the machine is saturated (load generator, mock and proxies share its cores), so the figures at this rate measure queueing more than each proxy's cost; CPU per request still compares",
				rate, msStr(d)))
		}
		overheadChecks(res, rate, per[sysBare].addP50, per[sysBare].addP99, per[sysBare].addCPU,
			per[sysSluice].addP50, per[sysSluice].addP99, per[sysSluice].addCPU, failed[sysSluice])
	}
	res.Tables = append(res.Tables, table)
	return res, nil
}

// overheadChecks states the targets at one rate: no failures; CPU per
// request at most twice the bare proxy's; at 2,000 req/s added p50 at most
// 2x and added p99 at most 3x the bare proxy's; at 1,000 req/s added p99
// at most 1.5 ms above the bare proxy's.
func overheadChecks(r *Result, rate int, bP50, bP99, bCPU, sP50, sP99, sCPU []float64, failed int) {
	bp50, bp99, bcpu := median(bP50), median(bP99), median(bCPU)
	sp50, sp99, scpu := median(sP50), median(sP99), median(sCPU)
	r.check(fmt.Sprintf("%d req/s: requests failed through the gateway", rate), "0", fmt.Sprint(failed), failed == 0)
	r.check(fmt.Sprintf("%d req/s: added CPU per request", rate), fmt.Sprintf("<= 2x bare (%.3f s/1k)", 2*bcpu),
		fmt.Sprintf("%.3f s/1k (%.2fx)", scpu, ratio(scpu, bcpu)), scpu <= 2*bcpu)
	switch rate {
	case 2000:
		r.check("2000 req/s: added p50", fmt.Sprintf("<= 2x bare (%s)", msStr(2*bp50)),
			fmt.Sprintf("%s (%.2fx)", msStr(sp50), ratio(sp50, bp50)), sp50 <= 2*max(bp50, 0.01))
		r.check("2000 req/s: added p99", fmt.Sprintf("<= 3x bare (%s)", msStr(3*bp99)),
			fmt.Sprintf("%s (%.2fx)", msStr(sp99), ratio(sp99, bp99)), sp99 <= 3*max(bp99, 0.01))
	case 1000:
		r.check("1000 req/s: added p99", fmt.Sprintf("<= bare + 1.5 ms (%s)", msStr(bp99+1.5)),
			msStr(sp99), sp99 <= bp99+1.5)
	}
}

// overheadRound sends to s at rate for d, open loop: each request leaves
// at its scheduled time whatever is still in flight, and its latency runs
// from that scheduled time to the end of its answer.
func overheadRound(ctx context.Context, clk clock.Clock, s overheadSystem, bodies [][]byte, rate int, d time.Duration) roundResult {
	n := max(int(d.Seconds()*float64(rate)), 1)
	interval := time.Second / time.Duration(max(rate, 1))
	lat := make([]time.Duration, n)
	failed := make([]bool, n)
	runtime.GC() // the previous round's garbage is not this round's cost
	cpu0 := processCPU()
	t0 := clk.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; {
		due := min(int(clk.Now().Sub(t0)/interval)+1, n)
		for ; i < due; i++ {
			j, at, body := i, t0.Add(time.Duration(i)*interval), bodies[i%len(bodies)]
			wg.Go(func() {
				err := overheadSend(ctx, s, body)
				lat[j] = clk.Now().Sub(at)
				failed[j] = err != nil
			})
		}
		if i < n {
			if clock.Sleep(ctx, clk, t0.Add(time.Duration(i)*interval).Sub(clk.Now())) != nil {
				break
			}
		}
	}
	wg.Wait()
	runtime.GC() // this round's garbage is
	r := roundResult{lat: lat, sent: n, cpu: processCPU() - cpu0}
	for _, f := range failed {
		if f {
			r.errors++
		}
	}
	return r
}

// overheadSend posts body to s and reads the answer in full.
func overheadSend(ctx context.Context, s overheadSystem, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	req.Header = header(Item{Protocol: llm.OpenAI}, openAIKey)
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s: %w", s.name, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("reading %s: %w", s.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", s.name, resp.StatusCode)
	}
	return nil
}

// bareProxy is the floor the gateway is compared with: the standard
// library's reverse proxy with immediate flushing and the same transport.
type bareProxy struct {
	url string
	srv *http.Server
}

func startBareProxy(target string) (*bareProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("parsing mock URL: %w", err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = u.Host },
		FlushInterval: -1,
		Transport:     newTransport(),
		// A failed request is counted by the load generator; it is not logged.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bare proxy listen: %w", err)
	}
	b := &bareProxy{url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: rp, ReadHeaderTimeout: stopTimeout}}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *bareProxy) stop(ctx context.Context) error {
	if err := b.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stopping bare proxy: %w", err)
	}
	return nil
}

// cpuPer1k is the round's process CPU seconds per 1,000 requests sent.
func cpuPer1k(r roundResult) float64 {
	if r.sent == 0 {
		return 0
	}
	return r.cpu.Seconds() * 1000 / float64(r.sent)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func msf(d time.Duration) float64 { return float64(d) / 1e6 }

func msStr(v float64) string { return fmt.Sprintf("%.2f ms", v) }

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
