package scenario

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

func TestOracle(t *testing.T) {
	t.Parallel()
	s := time.Second
	req := func(at time.Duration, c llm.Priority, in, out, maxTok int) OracleRequest {
		return OracleRequest{At: at, Class: c, InputTokens: in, OutputTokens: out, MaxTokens: maxTok}
	}
	tests := []struct {
		name string
		cfg  OracleConfig
		reqs []OracleRequest
		// want are the admission times; -1 means never served.
		want []time.Duration
		// done, when set, are the reply ends.
		done []time.Duration
	}{
		{name: "unlimited: admitted at arrival, reply of TTFT + per-token × (output - 1)",
			cfg:  OracleConfig{TTFT: 200 * time.Millisecond, PerToken: 2 * time.Millisecond},
			reqs: []OracleRequest{req(0, llm.Low, 5, 1, 10), req(s, llm.Critical, 5, 101, 1024), req(2*s, llm.High, 5, 50, 10)},
			want: []time.Duration{0, s, 2 * s},
			done: []time.Duration{200 * time.Millisecond, s + 400*time.Millisecond, 2*s + 218*time.Millisecond}},
		{name: "requests bucket: two at once, then one per second",
			cfg:  OracleConfig{Limits: mock.Limits{RPM: 60}, BurstSeconds: 2},
			reqs: []OracleRequest{req(0, llm.Normal, 1, 1, 1), req(0, llm.Normal, 1, 1, 1), req(0, llm.Normal, 1, 1, 1), req(0, llm.Normal, 1, 1, 1)},
			want: []time.Duration{0, 0, s, 2 * s}},
		{name: "strict priority: a later critical goes before queued lows",
			cfg:  OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 1}, // 10 tokens/s, depth 10
			reqs: []OracleRequest{req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1), req(500*time.Millisecond, llm.Critical, 10, 1, 1)},
			want: []time.Duration{0, 2 * s, 3 * s, s}},
		{name: "a large head is not overtaken by smaller lower-class requests",
			cfg:  OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 1},
			reqs: []OracleRequest{req(0, llm.Critical, 5, 1, 1), req(0, llm.High, 10, 1, 1), req(0, llm.Low, 1, 1, 1)},
			want: []time.Duration{0, 500 * time.Millisecond, 600 * time.Millisecond}},
		{name: "FIFO within a class",
			cfg:  OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 1},
			reqs: []OracleRequest{req(0, llm.High, 10, 1, 1), req(0, llm.High, 1, 1, 1)},
			want: []time.Duration{0, 100 * time.Millisecond}},
		{name: "too large for the bucket: never served, blocks nobody",
			cfg:  OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 1},
			reqs: []OracleRequest{req(0, llm.Critical, 11, 1, 1), req(0, llm.Low, 10, 1, 1)},
			want: []time.Duration{-1, 0}},
		{name: "burst room: low keeps 95 % of the depth free, so a critical burst finds it",
			cfg: OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 100, Room: OracleBurstRoom}, // 10/s, depth 1000
			reqs: []OracleRequest{req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1),
				req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1), req(0, llm.Low, 10, 1, 1),
				req(1500*time.Millisecond, llm.Critical, 900, 1, 1)},
			// Five lows fit above 950; the sixth waits 1 s for 10 tokens of
			// refill; the critical finds 955 at 1.5 s; the seventh low then
			// waits for the level to climb back from 55 to 960.
			want: []time.Duration{0, 0, 0, 0, 0, s, 92 * s, 1500 * time.Millisecond}},
		{name: "strict: the same lows drain the bucket and the critical waits",
			cfg: OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 10}, // depth 100
			reqs: []OracleRequest{req(0, llm.Low, 50, 1, 1), req(0, llm.Low, 50, 1, 1), req(0, llm.Critical, 0, 1, 1),
				req(s, llm.Critical, 60, 1, 1)},
			want: []time.Duration{0, 0, 0, 6 * s}},
		{name: "burst room: a low larger than the rule allows waits for a full bucket",
			cfg:  OracleConfig{Limits: mock.Limits{ITPM: 600}, BurstSeconds: 10, Room: OracleBurstRoom}, // depth 100
			reqs: []OracleRequest{req(0, llm.Critical, 30, 1, 1), req(0, llm.Low, 50, 1, 1)},
			want: []time.Duration{0, 3 * s}},
		{name: "reserve: max_tokens held until the reply ends, then the unused part refunded",
			cfg:  OracleConfig{Limits: mock.Limits{OTPM: 600}, BurstSeconds: 15, TTFT: s}, // depth 150
			reqs: []OracleRequest{req(0, llm.High, 1, 10, 100), req(0, llm.High, 1, 10, 100)},
			// At 1 s the first reply ends: 40 + 10 of refill + 90 refunded.
			want: []time.Duration{0, s}},
		{name: "realtime: only one token needed at admission, output charged at the end",
			cfg:  OracleConfig{Limits: mock.Limits{OTPM: 600}, BurstSeconds: 15, TTFT: s, OTPMMode: mock.OTPMRealtime},
			reqs: []OracleRequest{req(0, llm.High, 1, 200, 1000), req(0, llm.High, 1, 10, 1000), req(2*s, llm.High, 1, 10, 1000)},
			// Both replies end at 1 s and charge 210 to a full bucket: -60;
			// the third needs the level back at 1, 6.1 s of refill later.
			want: []time.Duration{0, 0, 7100 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := SimulateOracle(tc.cfg, tc.reqs)
			require.NoError(t, err)
			require.Len(t, got, len(tc.reqs))
			for i, o := range got {
				if tc.want[i] < 0 {
					require.False(t, o.Served, "request %d", i)
					continue
				}
				require.True(t, o.Served, "request %d", i)
				require.InDelta(t, float64(tc.want[i]), float64(o.Admitted), float64(time.Microsecond), "request %d admitted", i)
				if tc.done != nil {
					require.Equal(t, tc.done[i], o.Done, "request %d done", i)
				}
			}
		})
	}
}

func TestOracleRejectsBadInput(t *testing.T) {
	t.Parallel()
	ok := []OracleRequest{{At: 0, Class: llm.Low, InputTokens: 1, OutputTokens: 1, MaxTokens: 1}}
	for _, cfg := range []OracleConfig{{Room: [llm.NumPriorities]float64{0, 1, 0, 0}}, {OTPMMode: "lazy"},
		{BurstSeconds: -1}, {TTFT: -1}, {Limits: mock.Limits{RPM: -1}}} {
		_, err := SimulateOracle(cfg, ok)
		require.ErrorContains(t, err, "must be")
	}
	_, err := SimulateOracle(OracleConfig{}, []OracleRequest{{MaxTokens: 0}})
	require.ErrorContains(t, err, "MaxTokens >= 1")
}

// TestOracleNeverExceedsTheProvider: on random bursty workloads, replaying
// the oracle's admissions against the provider's buckets never finds one
// that would not fit, every class is served in arrival order, and each
// reply takes the mock's time; with burst room, no request is starved.
func TestOracleNeverExceedsTheProvider(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		var reqs []OracleRequest
		at := time.Duration(0)
		for range 300 {
			if rng.IntN(10) == 0 {
				at += time.Duration(rng.IntN(5000)) * time.Millisecond
			}
			reqs = append(reqs, OracleRequest{At: at, Class: llm.Priority(rng.IntN(4)), InputTokens: 1 + rng.IntN(400),
				OutputTokens: 1 + rng.IntN(100), MaxTokens: 100 + rng.IntN(100)})
		}
		mode := mock.OTPMReserve
		if seed%2 == 1 {
			mode = mock.OTPMRealtime
		}
		for _, room := range [][llm.NumPriorities]float64{OracleStrict, OracleBurstRoom} {
			cfg := OracleConfig{Limits: mock.Limits{RPM: 600, ITPM: 6000, OTPM: 3000}, BurstSeconds: 5, OTPMMode: mode,
				TTFT: 100 * time.Millisecond, PerToken: time.Millisecond, Room: room}
			got, err := SimulateOracle(cfg, reqs)
			require.NoError(t, err)
			checkOracle(t, cfg.WithDefaults(), reqs, got)
		}
	}
}

// checkOracle replays outcomes against an independent model of the
// provider's buckets.
func checkOracle(t *testing.T, cfg OracleConfig, reqs []OracleRequest, got []OracleOutcome) {
	t.Helper()
	type ev struct {
		at    time.Duration
		admit bool
		i     int
	}
	var evs []ev
	last := map[llm.Priority]time.Duration{}
	for i, o := range got {
		require.True(t, o.Served, "nothing here exceeds a bucket")
		require.GreaterOrEqual(t, o.Admitted, reqs[i].At)
		out := min(reqs[i].OutputTokens, reqs[i].MaxTokens)
		require.Equal(t, o.Admitted+cfg.TTFT+time.Duration(out-1)*cfg.PerToken, o.Done)
		evs = append(evs, ev{o.Admitted, true, i}, ev{o.Done, false, i})
	}
	for i := range reqs { // FIFO per class: arrival order is index order here
		c := reqs[i].Class
		require.GreaterOrEqual(t, got[i].Admitted, last[c], "class %s out of order", c)
		last[c] = got[i].Admitted
	}
	// Ends before admissions at the same instant, as the simulation does.
	slices.SortStableFunc(evs, func(a, b ev) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(btoi(a.admit), btoi(b.admit))
	})
	rates := []float64{float64(cfg.Limits.RPM) / 60, float64(cfg.Limits.ITPM) / 60, float64(cfg.Limits.OTPM) / 60}
	level := make([]float64, 3)
	for d := range level {
		level[d] = rates[d] * cfg.BurstSeconds
	}
	now := time.Duration(0)
	for _, e := range evs {
		for d := range level {
			level[d] = math.Min(rates[d]*cfg.BurstSeconds, level[d]+rates[d]*(e.at-now).Seconds())
		}
		now = e.at
		r := reqs[e.i]
		out := float64(min(r.OutputTokens, r.MaxTokens))
		if !e.admit {
			delta := out
			if cfg.OTPMMode == mock.OTPMReserve {
				delta = out - float64(r.MaxTokens)
			}
			level[2] = math.Min(rates[2]*cfg.BurstSeconds, level[2]-delta)
			continue
		}
		need := []float64{1, float64(r.InputTokens), 1}
		if cfg.OTPMMode == mock.OTPMReserve {
			need[2] = float64(r.MaxTokens)
		}
		for d := range level {
			require.GreaterOrEqual(t, level[d], need[d]-1e-3, "dimension %d over-admitted at %v", d, e.at)
			if d < 2 || cfg.OTPMMode == mock.OTPMReserve {
				level[d] -= need[d]
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
