package dispatch

import (
	"math"
	"sync"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// Calibration constants: how the estimates learn from the usage the
// provider reports (engine constants, not configuration).
const (
	// CalibrationWarmup is how many answers of a model are needed before
	// its calibration is applied.
	CalibrationWarmup = 8
	// InputRatioAlpha is the weight of each new answer in the moving
	// average of reported input tokens over the estimate.
	InputRatioAlpha = 0.05
	// InputRatioMin and InputRatioMax bound the input calibration: the
	// estimate is never scaled below half nor above twice itself, however
	// odd the reports.
	InputRatioMin, InputRatioMax = 0.5, 2.0
	// OutputQuantile is the share of answers whose output fits the learned
	// output reservation (output_reservation: learned).
	OutputQuantile = 0.99
	// outputBins is the resolution of the output/max_tokens histogram.
	outputBins = 50
	// outputHalfLife halves the histogram's counts once it holds this many
	// answers, so it follows a workload that changes.
	outputHalfLife = 2000
	// calibrationModels bounds how many models an upstream learns.
	calibrationModels = 256
)

// calibrator learns, per model of one upstream, how the provider's
// reported usage compares with the estimates made before sending: the
// ratio of reported input tokens to the estimate (a moving average,
// bounded, starting at 1), applied to every later estimate, and the
// distribution of output tokens over max_tokens, whose OutputQuantile is
// reserved instead of max_tokens when learnOutput is set (a provider that
// charges only the output produced). The reservation is reconciled with
// the actual usage when the answer ends, as before. Safe for concurrent
// use.
type calibrator struct {
	learnOutput bool
	mu          sync.Mutex
	models      map[string]*modelCalibration
}

// modelCalibration is what one model has taught.
type modelCalibration struct {
	inRatio float64 // moving average of reported/estimated input tokens
	inN     int
	outHist [outputBins]float64 // output/max_tokens, bin i covers (i/bins, (i+1)/bins]
	outSum  float64
	outN    int
	outQ    float64 // OutputQuantile of outHist, as a share of max_tokens
}

func newCalibrator(learnOutput bool) *calibrator {
	return &calibrator{learnOutput: learnOutput, models: map[string]*modelCalibration{}}
}

// adjust returns the estimate as the model's answers have calibrated it:
// input tokens times the learned ratio, and (learnOutput) the output
// reservation cut to the learned quantile of max_tokens.
func (c *calibrator) adjust(est provider.Cost) provider.Cost {
	c.mu.Lock()
	m := c.models[est.Model]
	var ratio, q float64 = 1, 1
	var inWarm, outWarm bool
	if m != nil {
		ratio, inWarm = m.inRatio, m.inN >= CalibrationWarmup
		q, outWarm = m.outQ, m.outN >= CalibrationWarmup
	}
	c.mu.Unlock()
	if inWarm && est.InputTokens > 0 {
		est.InputTokens = max(1, int64(math.Ceil(float64(est.InputTokens)*ratio)))
	}
	if c.learnOutput && outWarm && est.OutputTokens > 0 {
		est.OutputTokens = max(1, min(est.OutputTokens, int64(math.Ceil(float64(est.OutputTokens)*q))))
	}
	return est
}

// observe learns from one answer: est is the estimate before calibration
// (the front door's), actual what the provider reported.
func (c *calibrator) observe(est provider.Cost, actual flow.Amount) {
	in, out := actual[flow.InputTokens], actual[flow.OutputTokens]
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.models[est.Model]
	if m == nil {
		if len(c.models) >= calibrationModels {
			return
		}
		m = &modelCalibration{inRatio: 1, outQ: 1}
		c.models[est.Model] = m
	}
	if est.InputTokens > 0 && in > 0 {
		m.learnInput(in / float64(est.InputTokens))
	}
	if est.OutputTokens > 0 && out >= 0 {
		m.learnOutput(out / float64(est.OutputTokens))
	}
}

func (m *modelCalibration) learnInput(r float64) {
	r = math.Min(math.Max(r, InputRatioMin), InputRatioMax)
	if m.inN == 0 {
		m.inRatio = r
	} else {
		m.inRatio += InputRatioAlpha * (r - m.inRatio)
	}
	m.inN++
}

func (m *modelCalibration) learnOutput(f float64) {
	f = math.Min(math.Max(f, 0), 1)
	i := min(max(int(math.Ceil(f*outputBins))-1, 0), outputBins-1)
	m.outHist[i]++
	m.outSum++
	m.outN++
	if m.outSum >= outputHalfLife {
		for j := range m.outHist {
			m.outHist[j] /= 2
		}
		m.outSum /= 2
	}
	// The quantile is the upper edge of the bin it falls in: never below
	// what OutputQuantile of the answers used.
	want, acc := OutputQuantile*m.outSum, 0.0
	for j, n := range m.outHist {
		acc += n
		if acc >= want {
			m.outQ = float64(j+1) / outputBins
			return
		}
	}
	m.outQ = 1
}
