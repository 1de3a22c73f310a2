package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// Trace replay defaults: issue 22's case.
const (
	// ReplayFromDefault is where the default traces are replayed from:
	// two quiet minutes of azure-code, then the busiest 10 s of its hour
	// (297 requests, 637k input tokens at 15m30s).
	ReplayFromDefault = 13 * time.Minute
	// ReplayWindowDefault is how much of each trace is replayed.
	ReplayWindowDefault = 4 * time.Minute
	// ReplayBatchDefault is the batch's size.
	ReplayBatchDefault = 3000
	// ReplayNoBatch as ReplayOptions.Batch sends no batch.
	ReplayNoBatch = -1
	// ReplayBatchInputMeanDefault is the batch's mean input size: 3,000
	// requests carry about 6M input tokens, which is the 2M-token bucket
	// plus what the default traces leave of a 2M ITPM quota for about
	// three minutes.
	ReplayBatchInputMeanDefault = 2000
	// ReplayBatchOutputMean is the batch's mean output size.
	ReplayBatchOutputMean = 200
	// ReplayTimeoutDefault is how long an interactive client waits.
	ReplayTimeoutDefault = 120 * time.Second
	// ReplayBatchTimeoutDefault is how long a batch client waits: long
	// enough for the default batch to drain.
	ReplayBatchTimeoutDefault = 15 * time.Minute
	// ReplayTTFTDefault and ReplayPerTokenDefault time the mock's replies
	// (a Sonnet-like first token and decode speed): unloaded, azure-code's
	// p95 is a few hundred milliseconds.
	ReplayTTFTDefault     = 200 * time.Millisecond
	ReplayPerTokenDefault = 2 * time.Millisecond
	// ReplayMaxTokensMin and ReplayMaxTokensFactor set each request's
	// max_tokens when the trace does not record one: max(1,024, 4 ×
	// output), far above what is generated, as applications do.
	ReplayMaxTokensMin    = 1024
	ReplayMaxTokensFactor = 4
	// ReplayBurstSecondsDefault is the mock's bucket depth in seconds of
	// refill (the mock's own default).
	ReplayBurstSecondsDefault = mock.BurstSecondsDefault
)

// Batch size distributions: lognormal with these sigmas, capped.
const (
	replayBatchInputSigma  = 1.0
	replayBatchInputCap    = 16 // × the mean
	replayBatchOutputSigma = 0.8
	replayBatchOutputMax   = 2000
)

// Quick sizes: ten seconds of the default traces' biggest burst at four
// times the speed, a 100-request batch and a 5 s bucket.
const (
	replayQuickFrom         = 15*time.Minute + 25*time.Second
	replayQuickWindow       = 10 * time.Second
	replayQuickSpeed        = 4.0
	replayQuickBatch        = 100
	replayQuickBurstSeconds = 5.0
)

// ReplayLimitsDefault are Anthropic's Tier 4 Sonnet limits.
var ReplayLimitsDefault = mock.Limits{RPM: 4000, ITPM: 2_000_000, OTPM: 400_000}

// ReplayTracesDefault are issue 22's services: the bursty coding service
// as critical, the chat service as high.
func ReplayTracesDefault() []TraceSpec {
	return []TraceSpec{{Source: "azure-code", Class: "critical"}, {Source: "azure-conv", Class: "high"}}
}

// TraceSpec is one replayed service.
type TraceSpec struct {
	// Source is a built-in trace's name (BuiltinTraces) or a file.
	Source string
	// Class is the service's priority class. Defaults to each record's
	// class, else critical for the first trace, high for the second and
	// normal after.
	Class string
	// TokenScale multiplies this trace's token counts, on top of
	// ReplayOptions.TokenScale. Defaults to 1.
	TokenScale float64
}

// ParseTraceSpec reads a service as `sluice bench trace --trace` takes
// it: SOURCE[:CLASS[:TOKEN_SCALE]], where CLASS may be left empty
// (SOURCE::0.25) and SOURCE may itself hold colons. A last part that is
// neither a class nor a scale belongs to SOURCE only if it looks like a
// path (holds '/' or '.'). Whether SOURCE exists is not checked.
func ParseTraceSpec(s string) (TraceSpec, error) {
	parts := strings.Split(s, ":")
	isClass := func(v string) bool { _, err := llm.ParsePriority(v); return err == nil }
	isNumber := func(v string) bool { _, err := strconv.ParseFloat(v, 64); return err == nil }
	spec := TraceSpec{Source: s}
	n := len(parts)
	switch {
	case n >= 3 && (parts[n-2] == "" || isClass(parts[n-2])) && isNumber(parts[n-1]):
		f, _ := strconv.ParseFloat(parts[n-1], 64)
		if !(f > 0 && f <= 1000) {
			return TraceSpec{}, errors.New("the token scale must be a number in (0, 1000]")
		}
		spec = TraceSpec{Source: strings.Join(parts[:n-2], ":"), Class: parts[n-2], TokenScale: f}
	case n >= 2 && isClass(parts[n-1]):
		spec = TraceSpec{Source: strings.Join(parts[:n-1], ":"), Class: parts[n-1]}
	case n >= 2 && !strings.ContainsAny(parts[n-1], "/."):
		return TraceSpec{}, errors.New("want NAME_OR_FILE[:class[:token-scale]] with class critical, high, normal or low")
	}
	if spec.Source == "" {
		return TraceSpec{}, errors.New("name a built-in trace or a file")
	}
	return spec, nil
}

// ParseBatchSpec reads a batch as `sluice bench trace --batch` takes it:
// N[:CLASS], N in [0, 1000000]; the class is "" when not given.
func ParseBatchSpec(s string) (int, string, error) {
	num, class, hasClass := strings.Cut(s, ":")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 || n > 1_000_000 {
		return 0, "", errors.New("want N[:class] with N in [0, 1000000]")
	}
	if hasClass {
		if _, err := llm.ParsePriority(class); err != nil {
			return 0, "", err
		}
	}
	return n, class, nil
}

// ReplayOptions configure the trace scenario.
type ReplayOptions struct {
	// Traces are the interactive services, each replayed at its recorded
	// arrival times. Defaults to ReplayTracesDefault.
	Traces []TraceSpec
	// From is where in the traces the window starts. Defaults to 0, or to
	// ReplayFromDefault with the default traces.
	From time.Duration
	// Window is how much of each trace is replayed. Defaults to
	// ReplayWindowDefault.
	Window time.Duration
	// Speed compresses time: arrivals, reply times, the bucket depth and
	// the timeouts are divided by it and the limits multiplied, so the load
	// relative to the quota is unchanged. Defaults to 1.
	Speed float64
	// TokenScale multiplies every trace's input and output tokens (not the
	// batch's, sized by BatchInputMean). Defaults to 1.
	TokenScale float64
	// Batch is how many requests are sent at the start, all at once;
	// ReplayNoBatch sends none. Defaults to ReplayBatchDefault.
	Batch int
	// BatchClass is the batch's class. Defaults to low.
	BatchClass string
	// BatchInputMean is the batch's mean input size in tokens. Defaults to
	// ReplayBatchInputMeanDefault.
	BatchInputMean int
	// Limits are the mock's per-minute limits, on one key. Defaults to
	// ReplayLimitsDefault.
	Limits mock.Limits
	// BurstSeconds is the mock's bucket depth in seconds of refill.
	// Defaults to ReplayBurstSecondsDefault (5 with Quick).
	BurstSeconds float64
	// Profile is the gateway upstream's profile: balanced, latency or
	// throughput. Defaults to balanced (upstream.ProfileDefault).
	Profile string
	// Timeout and BatchTimeout are how long an interactive and a batch
	// client wait for an answer. Default to ReplayTimeoutDefault and
	// ReplayBatchTimeoutDefault.
	Timeout, BatchTimeout time.Duration
	// TTFT and PerToken time the mock's replies. Default to
	// ReplayTTFTDefault and ReplayPerTokenDefault.
	TTFT, PerToken time.Duration
}

// WithDefaults returns r with every zero field set to its default.
func (r ReplayOptions) WithDefaults() ReplayOptions {
	if len(r.Traces) == 0 {
		r.Traces = ReplayTracesDefault()
		r.From = cmp.Or(r.From, ReplayFromDefault)
	}
	r.Traces = slices.Clone(r.Traces)
	for i := range r.Traces {
		r.Traces[i].TokenScale = cmp.Or(r.Traces[i].TokenScale, 1)
	}
	r.Window = cmp.Or(r.Window, ReplayWindowDefault)
	r.Speed = cmp.Or(r.Speed, 1)
	r.TokenScale = cmp.Or(r.TokenScale, 1)
	r.Batch = cmp.Or(r.Batch, ReplayBatchDefault)
	r.BatchClass = cmp.Or(r.BatchClass, llm.Low.String())
	r.BatchInputMean = cmp.Or(r.BatchInputMean, ReplayBatchInputMeanDefault)
	if r.Limits == (mock.Limits{}) {
		r.Limits = ReplayLimitsDefault
	}
	r.BurstSeconds = cmp.Or(r.BurstSeconds, ReplayBurstSecondsDefault)
	r.Profile = cmp.Or(r.Profile, string(upstream.ProfileDefault))
	r.Timeout = cmp.Or(r.Timeout, ReplayTimeoutDefault)
	r.BatchTimeout = cmp.Or(r.BatchTimeout, ReplayBatchTimeoutDefault)
	r.TTFT = cmp.Or(r.TTFT, ReplayTTFTDefault)
	r.PerToken = cmp.Or(r.PerToken, ReplayPerTokenDefault)
	return r
}

// validate checks r as given (zero fields allowed).
func (r ReplayOptions) validate() error {
	var errs []error
	scale := func(name string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) || v > 1000 {
			errs = append(errs, fmt.Errorf("%s must be in [0, 1000] (0 = default), got %v", name, v))
		}
	}
	for i, t := range r.Traces {
		if t.Source == "" {
			errs = append(errs, fmt.Errorf("Traces[%d].Source must name a built-in trace or a file", i))
		}
		if t.Class != "" {
			if _, err := llm.ParsePriority(t.Class); err != nil {
				errs = append(errs, fmt.Errorf("Traces[%d].Class: %w", i, err))
			}
		}
		scale(fmt.Sprintf("Traces[%d].TokenScale", i), t.TokenScale)
	}
	scale("Speed", r.Speed)
	if !(r.BurstSeconds >= 0 && r.BurstSeconds <= 3600) {
		errs = append(errs, fmt.Errorf("BurstSeconds must be in [0, 3600] (0 = default), got %v", r.BurstSeconds))
	}
	scale("TokenScale", r.TokenScale)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"From", r.From}, {"Window", r.Window}, {"Timeout", r.Timeout}, {"BatchTimeout", r.BatchTimeout}, {"TTFT", r.TTFT}, {"PerToken", r.PerToken}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %v", d.name, d.v))
		}
	}
	if r.Batch < ReplayNoBatch || r.Batch > 1_000_000 {
		errs = append(errs, fmt.Errorf("Batch must be in [0, 1000000] or ReplayNoBatch, got %d", r.Batch))
	}
	if r.BatchClass != "" {
		if _, err := llm.ParsePriority(r.BatchClass); err != nil {
			errs = append(errs, fmt.Errorf("BatchClass: %w", err))
		}
	}
	if r.BatchInputMean < 0 || r.BatchInputMean > TraceTokensMax/replayBatchInputCap {
		errs = append(errs, fmt.Errorf("BatchInputMean must be in [0, %d], got %d", TraceTokensMax/replayBatchInputCap, r.BatchInputMean))
	}
	if r.Limits.RPM < 0 || r.Limits.ITPM < 0 || r.Limits.OTPM < 0 || r.Limits.TPM != 0 {
		errs = append(errs, fmt.Errorf("Limits must be >= 0 (RPM, ITPM, OTPM; no TPM), got %+v", r.Limits))
	}
	if r.Profile != "" {
		if _, err := upstream.ParseProfile(r.Profile); err != nil {
			errs = append(errs, fmt.Errorf("Profile: %w", err))
		}
	}
	return errors.Join(errs...)
}

// replayService is one group of requests: a trace, or the batch.
type replayService struct {
	name  string
	class llm.Priority
	batch bool
	// span is the trace's own length, for errors.
	span time.Duration
	// requests and input are the group's totals after scaling; peak is
	// the most input tokens in any 10 s of the trace (before the speed-up).
	requests int
	input    int64
	peak     int64
}

// replayPlan is everything a trace run sends and simulates.
type replayPlan struct {
	ro       ReplayOptions // defaulted
	quick    bool
	items    []Item // the batch first, then arrivals in order
	services []replayService
	// batchGroup is the batch's Item.Group, -1 without a batch.
	batchGroup int
	batchClass llm.Priority
	// interactive marks the classes the traces use.
	interactive [llm.NumPriorities]bool
	// Provider and clients, in the run's (sped-up) time.
	limits                mock.Limits
	depthSeconds          float64
	ttft, perToken        time.Duration
	timeout, batchTimeout time.Duration
	window                time.Duration
	otpmMode              string
	outputReservation     string // the sluice run's output_reservation
}

// planReplay loads the traces and builds the run's requests.
func planReplay(o Options) (*replayPlan, error) {
	given := o.Replay
	ro := given.WithDefaults()
	p := &replayPlan{ro: ro, quick: o.Quick, batchGroup: -1, otpmMode: cmp.Or(o.OTPMMode, mock.OTPMReserve),
		outputReservation: cmp.Or(o.OutputReservation, upstream.OutputReservationDefault)}
	if o.Quick {
		if len(given.Traces) == 0 && given.From == 0 {
			ro.From = replayQuickFrom
		}
		if given.Window == 0 {
			ro.Window = replayQuickWindow
		}
		if given.Speed == 0 {
			ro.Speed = replayQuickSpeed
		}
		if given.Batch == 0 {
			ro.Batch = replayQuickBatch
		}
		if given.BurstSeconds == 0 {
			ro.BurstSeconds = replayQuickBurstSeconds
		}
		p.ro = ro
	}
	sp := ro.Speed
	scaleDur := func(d time.Duration) time.Duration { return time.Duration(float64(d) / sp) }
	p.limits = mock.Limits{RPM: int64(math.Round(float64(ro.Limits.RPM) * sp)), ITPM: int64(math.Round(float64(ro.Limits.ITPM) * sp)),
		OTPM: int64(math.Round(float64(ro.Limits.OTPM) * sp))}
	p.depthSeconds = ro.BurstSeconds / sp
	p.ttft, p.perToken = scaleDur(ro.TTFT), scaleDur(ro.PerToken)
	p.timeout, p.batchTimeout = scaleDur(ro.Timeout), scaleDur(ro.BatchTimeout)
	p.window = scaleDur(ro.Window)

	rng := rand.New(rand.NewPCG(o.Seed, 0x7ace))
	positional := []llm.Priority{llm.Critical, llm.High}
	var interactive []Item
	for g, spec := range ro.Traces {
		tr, err := LoadTrace(spec.Source)
		if err != nil {
			return nil, err
		}
		svc := replayService{name: tr.Name, class: llm.Normal, span: tr.Records[len(tr.Records)-1].At}
		if g < len(positional) {
			svc.class = positional[g]
		}
		named := spec.Class != ""
		if named {
			svc.class, _ = llm.ParsePriority(spec.Class) // validated
		}
		scale := ro.TokenScale * spec.TokenScale
		buckets := map[time.Duration]int64{}
		for _, rec := range tr.Records {
			if rec.At < ro.From || rec.At >= ro.From+ro.Window {
				continue
			}
			class := svc.class
			if !named && rec.ClassSet {
				class = rec.Class
			}
			in := max(1, int(math.Round(float64(rec.InputTokens)*scale)))
			out := max(1, int(math.Round(float64(rec.OutputTokens)*scale)))
			maxTok := max(ReplayMaxTokensMin, ReplayMaxTokensFactor*out)
			if rec.MaxTokens > 0 {
				maxTok = max(int(math.Round(float64(rec.MaxTokens)*scale)), out)
			}
			at := rec.At - ro.From
			interactive = append(interactive, Item{At: time.Duration(float64(at) / sp), Priority: class, Protocol: llm.Anthropic,
				InputTokens: in, MaxTokens: maxTok, OutputTokens: out, Group: g})
			p.interactive[class] = true
			svc.requests++
			svc.input += int64(in)
			buckets[at/(10*time.Second)] += int64(in)
		}
		if svc.requests == 0 {
			return nil, fmt.Errorf("trace %s has no requests from %v to %v (it spans 0 to %v)", tr.Name, ro.From, ro.From+ro.Window, svc.span.Round(time.Second))
		}
		for _, v := range buckets {
			svc.peak = max(svc.peak, v)
		}
		p.services = append(p.services, svc)
	}
	slices.SortStableFunc(interactive, func(a, b Item) int { return cmp.Compare(a.At, b.At) })
	if ro.Batch > 0 {
		p.batchGroup = len(ro.Traces)
		p.batchClass, _ = llm.ParsePriority(ro.BatchClass) // validated
		svc := replayService{name: "batch", class: p.batchClass, batch: true}
		inMedian := float64(ro.BatchInputMean) / math.Exp(replayBatchInputSigma*replayBatchInputSigma/2)
		outMedian := float64(ReplayBatchOutputMean) / math.Exp(replayBatchOutputSigma*replayBatchOutputSigma/2)
		for range ro.Batch {
			in := lognormalInt(rng, inMedian, replayBatchInputSigma, replayBatchInputCap*ro.BatchInputMean)
			out := lognormalInt(rng, outMedian, replayBatchOutputSigma, replayBatchOutputMax)
			p.items = append(p.items, Item{Priority: p.batchClass, Protocol: llm.Anthropic, InputTokens: in,
				MaxTokens: max(ReplayMaxTokensMin, ReplayMaxTokensFactor*out), OutputTokens: out, Group: p.batchGroup})
			svc.requests++
			svc.input += int64(in)
		}
		p.services = append(p.services, svc)
	}
	p.items = append(p.items, interactive...)
	for i := range p.items {
		p.items[i].Index = i
		p.items[i].Seed = rng.Uint64()
	}
	return p, nil
}

// oracleRequests are the plan's requests as the oracle sees them.
func (p *replayPlan) oracleRequests() []OracleRequest {
	reqs := make([]OracleRequest, len(p.items))
	for i, it := range p.items {
		reqs[i] = OracleRequest{At: it.At, Class: it.Priority, InputTokens: it.InputTokens, OutputTokens: it.OutputTokens, MaxTokens: it.MaxTokens}
	}
	return reqs
}

// oracle runs the oracle with room and returns its outcomes as a run's.
func (p *replayPlan) oracle(room [llm.NumPriorities]float64) ([]Outcome, error) {
	got, err := SimulateOracle(OracleConfig{Limits: p.limits, BurstSeconds: p.depthSeconds, OTPMMode: p.otpmMode,
		TTFT: p.ttft, PerToken: p.perToken, Room: room}, p.oracleRequests())
	if err != nil {
		return nil, err
	}
	outs := make([]Outcome, len(got))
	for i, g := range got {
		it := p.items[i]
		outs[i] = Outcome{Item: it, Start: it.At, End: g.Done, Status: 200, Attempts: 1}
		if !g.Served {
			outs[i] = Outcome{Item: it, Start: it.At, End: it.At, Err: errOracleUnservable}
		}
	}
	return outs, nil
}

// errOracleUnservable marks a request larger than a bucket can hold.
var errOracleUnservable = errors.New("larger than the provider's bucket: never admitted")

// timed bounds each request by its client's timeout.
func (p *replayPlan) timed(send sender) sender {
	return func(ctx context.Context, it Item) (int, int, error) {
		d := p.timeout
		if it.Group == p.batchGroup {
			d = p.batchTimeout
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return send(ctx, it)
	}
}

// runTrace replays the traces unloaded, with the naive client and through
// the gateway, computes both oracles and reports them side by side.
func runTrace(ctx context.Context, o Options) (*Result, error) {
	p, err := planReplay(o)
	if err != nil {
		return nil, err
	}
	mcfg := mock.Config{Limits: p.limits, BurstSeconds: p.depthSeconds, OTPMMode: p.otpmMode, TTFT: p.ttft,
		PerToken: p.perToken, Seed: o.Seed}
	unlimited := mcfg
	unlimited.Limits = mock.Limits{}
	var interactive []Item
	for _, it := range p.items {
		if it.Group != p.batchGroup {
			interactive = append(interactive, it)
		}
	}
	drive := func(items []Item) func(context.Context, sender) []Outcome {
		return func(ctx context.Context, send sender) []Outcome {
			return runOpenLoop(ctx, o.Clock, items, p.timed(send))
		}
	}
	o.progress("trace: unloaded: %d interactive requests over %v through the gateway, unlimited key", len(interactive), p.window)
	base, err := runSide(ctx, o, sideConfig{name: "unloaded", mock: unlimited, gateway: &gatewaySetup{profile: upstream.Profile(p.ro.Profile)},
		run: drive(interactive)})
	if err != nil {
		return nil, fmt.Errorf("unloaded run: %w", err)
	}
	var naives []NaiveConfig
	for _, svc := range p.services {
		// Each service is its own application, in flight as its arrivals
		// demand; the batch sends everything at once.
		naives = append(naives, NaiveConfig{Concurrency: max(svc.requests, 1)})
	}
	o.progress("trace: naive: %d requests (%d batch) straight to the mock", len(p.items), len(p.items)-len(interactive))
	nv, err := runSide(ctx, o, sideConfig{name: "naive", mock: mcfg, naiveGroups: naives, run: drive(p.items)})
	if err != nil {
		return nil, fmt.Errorf("naive run: %w", err)
	}
	o.progress("trace: sluice: %d requests through the gateway (profile %s)", len(p.items), p.ro.Profile)
	gw := &gatewaySetup{profile: upstream.Profile(p.ro.Profile), outputReservation: p.outputReservation,
		limits: upstream.Limits{RequestsPerMinute: p.limits.RPM, InputTokensPerMinute: p.limits.ITPM, OutputTokensPerMinute: p.limits.OTPM}}
	sl, err := runSide(ctx, o, sideConfig{name: "sluice", mock: mcfg, gateway: gw, run: drive(p.items)})
	if err != nil {
		return nil, fmt.Errorf("sluice run: %w", err)
	}
	strict, err := p.oracle(OracleStrict)
	if err != nil {
		return nil, err
	}
	room, err := p.oracle(OracleBurstRoom)
	if err != nil {
		return nil, err
	}
	return p.report([]replayRun{
		{key: "unloaded", label: "unloaded", outs: base.outs, stats: &base.stats},
		{key: "naive", label: "naive", outs: nv.outs, stats: &nv.stats},
		{key: "sluice", label: "sluice", outs: sl.outs, stats: &sl.stats},
		{key: "oracle_strict", label: "oracle, strict", outs: strict},
		{key: "oracle_room", label: "oracle, burst room", outs: room},
	}), nil
}
