package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// BurstyTrace defaults: bursts of 12 requests per second lasting 30 s on
// average, between quiet spells of 90 s at one request every 4 s, so
// minutes range from about 15 requests to about 700; inputs with a median
// of 1,000 tokens and 5 % drawn from a Pareto tail from 4,000 up.
const (
	BurstyDurationDefault     = time.Hour
	BurstyOnRateDefault       = 12.0
	BurstyOffRateDefault      = 0.25
	BurstyOnMeanDefault       = 30 * time.Second
	BurstyOffMeanDefault      = 90 * time.Second
	BurstyInputMedianDefault  = 1000.0
	BurstyInputSigmaDefault   = 0.9
	BurstyTailShareDefault    = 0.05
	BurstyTailMinDefault      = 4000.0
	BurstyTailAlphaDefault    = 1.5
	BurstyInputMaxDefault     = 64_000
	BurstyOutputMedianDefault = 150.0
	BurstyOutputSigmaDefault  = 0.8
	BurstyOutputMaxDefault    = 4000
)

// BurstyTrace describes a synthetic trace: arrivals from a two-state
// Markov-modulated Poisson process (an "on" state of bursts and an "off"
// state of quiet, each lasting an exponentially distributed time, with
// Poisson arrivals at the state's rate), inputs from a lognormal body with
// a Pareto tail, outputs lognormal. The same fields give the same trace.
type BurstyTrace struct {
	// Duration is the trace's length. Defaults to BurstyDurationDefault.
	Duration time.Duration
	// OnRate and OffRate are the arrival rates in requests per second in
	// a burst and between bursts. Default to BurstyOnRateDefault and
	// BurstyOffRateDefault.
	OnRate, OffRate float64
	// OnMean and OffMean are the mean lengths of a burst and of a quiet
	// spell. Default to BurstyOnMeanDefault and BurstyOffMeanDefault.
	OnMean, OffMean time.Duration
	// InputMedian and InputSigma are the lognormal body of the input
	// sizes: exp(ln InputMedian + InputSigma·N(0,1)). Default to
	// BurstyInputMedianDefault and BurstyInputSigmaDefault.
	InputMedian, InputSigma float64
	// TailShare of the inputs is drawn instead from a Pareto distribution
	// with scale TailMin and shape TailAlpha (P(X > x) = (TailMin/x)^α).
	// Default to BurstyTailShareDefault, BurstyTailMinDefault and
	// BurstyTailAlphaDefault.
	TailShare, TailMin, TailAlpha float64
	// InputMax caps an input. Defaults to BurstyInputMaxDefault.
	InputMax int
	// OutputMedian and OutputSigma are the lognormal output sizes, capped
	// at OutputMax. Default to BurstyOutputMedianDefault,
	// BurstyOutputSigmaDefault and BurstyOutputMaxDefault.
	OutputMedian, OutputSigma float64
	OutputMax                 int
	// Seed makes the trace reproducible. Defaults to 0.
	Seed uint64
}

// WithDefaults returns b with every zero field set to its default.
func (b BurstyTrace) WithDefaults() BurstyTrace {
	b.Duration = cmp.Or(b.Duration, BurstyDurationDefault)
	b.OnRate = cmp.Or(b.OnRate, BurstyOnRateDefault)
	b.OffRate = cmp.Or(b.OffRate, BurstyOffRateDefault)
	b.OnMean = cmp.Or(b.OnMean, BurstyOnMeanDefault)
	b.OffMean = cmp.Or(b.OffMean, BurstyOffMeanDefault)
	b.InputMedian = cmp.Or(b.InputMedian, BurstyInputMedianDefault)
	b.InputSigma = cmp.Or(b.InputSigma, BurstyInputSigmaDefault)
	b.TailShare = cmp.Or(b.TailShare, BurstyTailShareDefault)
	b.TailMin = cmp.Or(b.TailMin, BurstyTailMinDefault)
	b.TailAlpha = cmp.Or(b.TailAlpha, BurstyTailAlphaDefault)
	b.InputMax = cmp.Or(b.InputMax, BurstyInputMaxDefault)
	b.OutputMedian = cmp.Or(b.OutputMedian, BurstyOutputMedianDefault)
	b.OutputSigma = cmp.Or(b.OutputSigma, BurstyOutputSigmaDefault)
	b.OutputMax = cmp.Or(b.OutputMax, BurstyOutputMaxDefault)
	return b
}

func (b BurstyTrace) validate() error {
	var errs []error
	positive := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %v", name, v))
		}
	}
	positive("OnRate", b.OnRate)
	positive("OffRate", b.OffRate)
	positive("InputMedian", b.InputMedian)
	positive("InputSigma", b.InputSigma)
	positive("TailMin", b.TailMin)
	positive("TailAlpha", b.TailAlpha)
	positive("OutputMedian", b.OutputMedian)
	positive("OutputSigma", b.OutputSigma)
	if b.Duration <= 0 || b.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("Duration must be in (0, 24h], got %v", b.Duration))
	}
	if b.OnMean <= 0 || b.OffMean <= 0 {
		errs = append(errs, fmt.Errorf("OnMean and OffMean must be > 0, got %v and %v", b.OnMean, b.OffMean))
	}
	if !(b.TailShare >= 0 && b.TailShare <= 1) {
		errs = append(errs, fmt.Errorf("TailShare must be in [0, 1], got %v", b.TailShare))
	}
	if b.InputMax < 1 || b.InputMax > TraceTokensMax || b.OutputMax < 1 || b.OutputMax > TraceTokensMax {
		errs = append(errs, fmt.Errorf("InputMax and OutputMax must be in [1, %d], got %d and %d", TraceTokensMax, b.InputMax, b.OutputMax))
	}
	if b.OnRate*b.Duration.Seconds() > 10_000_000 {
		errs = append(errs, errors.New("OnRate × Duration must be at most 10 million requests"))
	}
	return errors.Join(errs...)
}

// GenerateBursty returns the trace b describes (defaults applied, then
// validated), named name. It starts in a quiet spell.
func GenerateBursty(name string, b BurstyTrace) (*Trace, error) {
	b = b.WithDefaults()
	if err := b.validate(); err != nil {
		return nil, fmt.Errorf("bursty trace: %w", err)
	}
	rng := rand.New(rand.NewPCG(b.Seed, 0xb0257))
	end := b.Duration.Seconds()
	tr := &Trace{Name: name}
	on := false
	for t := 0.0; t < end; on = !on {
		mean, rate := b.OffMean.Seconds(), b.OffRate
		if on {
			mean, rate = b.OnMean.Seconds(), b.OnRate
		}
		stateEnd := min(t+rng.ExpFloat64()*mean, end)
		for at := t + rng.ExpFloat64()/rate; at < stateEnd; at += rng.ExpFloat64() / rate {
			tr.Records = append(tr.Records, TraceRecord{
				At:           time.Duration(at * float64(time.Second)),
				InputTokens:  b.input(rng),
				OutputTokens: lognormalInt(rng, b.OutputMedian, b.OutputSigma, b.OutputMax),
			})
		}
		t = stateEnd
	}
	if len(tr.Records) == 0 {
		return nil, errors.New("bursty trace: no arrivals (raise the rates or the duration)")
	}
	return tr, nil
}

// input draws one input size: the Pareto tail with probability
// TailShare, else the lognormal body; capped at InputMax.
func (b BurstyTrace) input(rng *rand.Rand) int {
	if rng.Float64() < b.TailShare {
		u := 1 - rng.Float64() // (0, 1]
		return int(math.Min(math.Round(b.TailMin/math.Pow(u, 1/b.TailAlpha)), float64(b.InputMax)))
	}
	return lognormalInt(rng, b.InputMedian, b.InputSigma, b.InputMax)
}

// lognormalInt draws exp(ln median + sigma·N(0,1)), rounded and clamped to
// [1, hi].
func lognormalInt(rng *rand.Rand, median, sigma float64, hi int) int {
	x := math.Round(math.Exp(math.Log(median) + sigma*rng.NormFloat64()))
	return int(math.Min(math.Max(x, 1), float64(hi)))
}
