package scenario

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// The oracle is the yardstick of the trace replay: what an ideal scheduler
// would have done with the same requests against the same provider. It is
// a discrete-event simulation, computed, not run:
//
//   - The provider is the mock's model: per dimension (requests, input
//     tokens, output tokens) a bucket refilled continuously at limit/60 per
//     second up to BurstSeconds of refill, full at the start. A request is
//     admitted when every bucket holds its need: 1 request, its input
//     tokens, and on the output bucket its max_tokens (reserve mode: taken
//     at admission, the unused part refunded when the reply ends) or just
//     one token (realtime mode: the output charged when the reply ends).
//     A request needing more than a bucket can hold is never admitted, as
//     the mock never admits it.
//   - The scheduler knows every request's exact tokens, has no network and
//     no estimation error. It admits in strict priority: it scans the
//     classes from critical to low, admitting each class's head (FIFO
//     within a class) while it fits; a head that does not fit stops the
//     scan, so lower classes never overtake it and it is never starved.
//   - Room: class c must leave Room[c] of each bucket's depth unused after
//     admitting (the lower classes then take only what the more urgent ones
//     leave and the refill would otherwise overflow). A request larger than
//     the rule allows (need > (1-Room[c])·depth) is admitted when the
//     bucket is full, so it waits but is never starved.
//   - A reply takes TTFT + PerToken × (output - 1), as the mock's
//     non-streaming replies do; latency is that plus the wait for
//     admission.

// Room rules of the oracle.
var (
	// OracleStrict leaves no room: strict priority only.
	OracleStrict = [llm.NumPriorities]float64{}
	// OracleBurstRoom keeps room for bursts: high leaves 10 % and normal
	// and low 95 % of each bucket's depth unused after admission.
	OracleBurstRoom = [llm.NumPriorities]float64{0, 0.10, 0.95, 0.95}
)

// OracleConfig is the provider and the room rule the oracle simulates.
type OracleConfig struct {
	// Limits are the per-minute quotas (RPM, ITPM, OTPM; 0 = unlimited;
	// TPM is not simulated). Defaults to unlimited.
	Limits mock.Limits
	// BurstSeconds is each bucket's depth in seconds of refill. Defaults
	// to mock.BurstSecondsDefault.
	BurstSeconds float64
	// OTPMMode is mock.OTPMReserve or mock.OTPMRealtime. Defaults to
	// mock.OTPMReserve.
	OTPMMode string
	// TTFT and PerToken time a reply. Default to 0.
	TTFT, PerToken time.Duration
	// Room is the share of each bucket's depth class c leaves unused after
	// admission, in [0, 1). Defaults to OracleStrict (none).
	Room [llm.NumPriorities]float64
}

// WithDefaults returns c with every zero field set to its default.
func (c OracleConfig) WithDefaults() OracleConfig {
	c.BurstSeconds = cmp.Or(c.BurstSeconds, mock.BurstSecondsDefault)
	c.OTPMMode = cmp.Or(c.OTPMMode, mock.OTPMReserve)
	return c
}

func (c OracleConfig) validate() error {
	var errs []error
	if c.Limits.RPM < 0 || c.Limits.ITPM < 0 || c.Limits.OTPM < 0 {
		errs = append(errs, fmt.Errorf("Limits must be >= 0, got %+v", c.Limits))
	}
	if !(c.BurstSeconds > 0) || math.IsInf(c.BurstSeconds, 0) {
		errs = append(errs, fmt.Errorf("BurstSeconds must be > 0, got %v", c.BurstSeconds))
	}
	if c.OTPMMode != mock.OTPMReserve && c.OTPMMode != mock.OTPMRealtime {
		errs = append(errs, fmt.Errorf("OTPMMode must be %q or %q, got %q", mock.OTPMReserve, mock.OTPMRealtime, c.OTPMMode))
	}
	if c.TTFT < 0 || c.PerToken < 0 {
		errs = append(errs, fmt.Errorf("TTFT and PerToken must be >= 0, got %v and %v", c.TTFT, c.PerToken))
	}
	for i, r := range c.Room {
		if !(r >= 0 && r < 1) {
			errs = append(errs, fmt.Errorf("Room[%s] must be in [0, 1), got %v", llm.Priority(i), r))
		}
	}
	return errors.Join(errs...)
}

// OracleRequest is one request as the oracle sees it.
type OracleRequest struct {
	// At is the arrival time.
	At time.Duration
	// Class is the priority class.
	Class llm.Priority
	// InputTokens, OutputTokens and MaxTokens are exact; the reply is
	// min(OutputTokens, MaxTokens) tokens long, as the mock's.
	InputTokens, OutputTokens, MaxTokens int
}

// OracleOutcome is what the oracle did with one request.
type OracleOutcome struct {
	// Served is false for a request larger than a bucket can hold.
	Served bool
	// Admitted and Done are when it was admitted and its reply ended.
	Admitted, Done time.Duration
}

// Latency is the time from arrival to the end of the reply.
func (o OracleOutcome) Latency(r OracleRequest) time.Duration { return o.Done - r.At }

// Oracle bucket dimensions.
const (
	dimRequests = iota
	dimInput
	dimOutput
	numDims
)

// simBucket is one bucket of the simulated provider (a zero rate is
// unlimited).
type simBucket struct {
	rate, depth, level float64
	last               time.Duration
}

func (b *simBucket) refill(now time.Duration) {
	if b.rate > 0 && now > b.last {
		b.level = math.Min(b.depth, b.level+b.rate*(now-b.last).Seconds())
		b.last = now
	}
}

// fitEpsilon absorbs floating-point error in the level comparisons.
const fitEpsilon = 1e-6

// oracleSim is one simulation.
type oracleSim struct {
	cfg     OracleConfig
	reqs    []OracleRequest
	buckets [numDims]simBucket
}

// SimulateOracle runs the oracle on reqs (in any order) and returns one
// outcome per request, in reqs' order.
func SimulateOracle(cfg OracleConfig, reqs []OracleRequest) ([]OracleOutcome, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("oracle config: %w", err)
	}
	for i, r := range reqs {
		if r.At < 0 || !r.Class.Valid() || r.InputTokens < 0 || r.OutputTokens < 0 || r.MaxTokens < 1 {
			return nil, fmt.Errorf("oracle request %d: want At >= 0, a valid class, tokens >= 0 and MaxTokens >= 1, got %+v", i, r)
		}
	}
	s := &oracleSim{cfg: cfg, reqs: reqs}
	for d, limit := range []int64{cfg.Limits.RPM, cfg.Limits.ITPM, cfg.Limits.OTPM} {
		if limit > 0 {
			rate := float64(limit) / 60
			s.buckets[d] = simBucket{rate: rate, depth: rate * cfg.BurstSeconds, level: rate * cfg.BurstSeconds}
		}
	}
	return s.run()
}

// need is what admitting r takes from each bucket.
func (s *oracleSim) need(r OracleRequest) [numDims]float64 {
	out := 1.0
	if s.cfg.OTPMMode == mock.OTPMReserve {
		out = float64(r.MaxTokens)
	}
	return [numDims]float64{1, float64(r.InputTokens), out}
}

// servable reports whether r fits in empty-of-others full buckets.
func (s *oracleSim) servable(r OracleRequest) bool {
	n := s.need(r)
	for d := range s.buckets {
		if b := s.buckets[d]; b.rate > 0 && n[d] > b.depth+fitEpsilon {
			return false
		}
	}
	return true
}

// fits reports whether a class-c request r fits now, and if not, how long
// until it would with no other charge or refund.
func (s *oracleSim) fits(r OracleRequest) (bool, time.Duration) {
	n := s.need(r)
	var wait float64
	for d := range s.buckets {
		b := &s.buckets[d]
		if b.rate == 0 {
			continue
		}
		target := n[d] + s.cfg.Room[r.Class]*b.depth
		if target > b.depth {
			target = b.depth // larger than the rule allows: wait for a full bucket
		}
		if b.level < target-fitEpsilon {
			wait = max(wait, (target-b.level)/b.rate)
		}
	}
	if wait == 0 {
		return true, 0
	}
	return false, max(time.Duration(math.Ceil(wait*float64(time.Second))), 1)
}

// reply is how long r's reply takes.
func (s *oracleSim) reply(r OracleRequest) (time.Duration, int) {
	out := min(r.OutputTokens, r.MaxTokens)
	return s.cfg.TTFT + time.Duration(max(0, out-1))*s.cfg.PerToken, out
}

// completion is a reply ending: its reconciliation with the output bucket.
type completion struct {
	at time.Duration
	// outDelta is charged to the output bucket (negative refunds).
	outDelta float64
}

type completions []completion

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i].at < h[j].at }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *oracleSim) refill(now time.Duration) {
	for d := range s.buckets {
		s.buckets[d].refill(now)
	}
}

func (s *oracleSim) run() ([]OracleOutcome, error) {
	out := make([]OracleOutcome, len(s.reqs))
	order := make([]int, len(s.reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(s.reqs[a].At, s.reqs[b].At) })
	var queues [llm.NumPriorities][]int
	var pending completions
	next := 0 // next arrival in order
	now := time.Duration(0)
	if len(order) > 0 {
		now = s.reqs[order[0]].At
	}
	// Each step admits, completes, enqueues or wakes a head; a wake that
	// finds the head still short recomputes from the new levels.
	for steps, limit := 0, 64*len(s.reqs)+1024; ; steps++ {
		if steps > limit {
			return nil, errors.New("oracle: simulation did not converge")
		}
		s.refill(now)
		for pending.Len() > 0 && pending[0].at <= now {
			c := heap.Pop(&pending).(completion)
			if b := &s.buckets[dimOutput]; b.rate > 0 {
				b.level = math.Min(b.depth, b.level-c.outDelta)
			}
		}
		for ; next < len(order) && s.reqs[order[next]].At <= now; next++ {
			i := order[next]
			if !s.servable(s.reqs[i]) {
				continue // never admitted: Served stays false
			}
			queues[s.reqs[i].Class] = append(queues[s.reqs[i].Class], i)
		}
		wake := time.Duration(-1)
	scan:
		for c := range queues {
			for len(queues[c]) > 0 {
				i := queues[c][0]
				r := s.reqs[i]
				ok, wait := s.fits(r)
				if !ok {
					wake = now + wait
					break scan
				}
				queues[c] = queues[c][1:]
				n := s.need(r)
				for d := range s.buckets {
					if s.buckets[d].rate > 0 {
						s.buckets[d].level -= n[d]
					}
				}
				d, produced := s.reply(r)
				delta := float64(produced) // realtime: charged as the reply ends
				if s.cfg.OTPMMode == mock.OTPMReserve {
					delta = float64(produced) - n[dimOutput]
				}
				heap.Push(&pending, completion{at: now + d, outDelta: delta})
				out[i] = OracleOutcome{Served: true, Admitted: now, Done: now + d}
			}
		}
		t := wake
		if next < len(order) && (t < 0 || s.reqs[order[next]].At < t) {
			t = s.reqs[order[next]].At
		}
		if pending.Len() > 0 && (t < 0 || pending[0].at < t) {
			t = pending[0].at
		}
		if t < 0 {
			return out, nil
		}
		now = max(t, now)
	}
}
