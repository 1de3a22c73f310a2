package scenario

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
)

// Naive client defaults: the usual hand-written values.
const (
	// NaiveConcurrencyDefault is how many requests the naive client keeps
	// in flight.
	NaiveConcurrencyDefault = 32
	// NaiveMaxAttemptsDefault is how many attempts it makes per request.
	NaiveMaxAttemptsDefault = 5
	// NaiveBaseDelayDefault is the first backoff's ceiling.
	NaiveBaseDelayDefault = time.Second
	// NaiveMaxDelayDefault caps the backoff ceiling.
	NaiveMaxDelayDefault = 30 * time.Second
)

// NaiveConfig configures the baseline client.
type NaiveConfig struct {
	// Concurrency is the most requests in flight at once; callers beyond it
	// wait their turn. Defaults to NaiveConcurrencyDefault.
	Concurrency int
	// MaxAttempts is the most attempts per request (1 = no retry).
	// Defaults to NaiveMaxAttemptsDefault.
	MaxAttempts int
	// BaseDelay is the ceiling of the first backoff; it doubles per retry.
	// Defaults to NaiveBaseDelayDefault.
	BaseDelay time.Duration
	// MaxDelay caps the backoff ceiling. Defaults to NaiveMaxDelayDefault.
	MaxDelay time.Duration
	// HTTPClient sends the requests. Defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Clock times the waits. Defaults to the wall clock.
	Clock clock.Clock
	// Seed seeds the jitter. Defaults to 0.
	Seed uint64
}

// WithDefaults returns c with every zero field set to its default.
func (c NaiveConfig) WithDefaults() NaiveConfig {
	c.Concurrency = cmp.Or(c.Concurrency, NaiveConcurrencyDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, NaiveMaxAttemptsDefault)
	c.BaseDelay = cmp.Or(c.BaseDelay, NaiveBaseDelayDefault)
	c.MaxDelay = cmp.Or(c.MaxDelay, max(NaiveMaxDelayDefault, c.BaseDelay))
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

func (c NaiveConfig) validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("Concurrency must be >= 1, got %d", c.Concurrency)
	case c.MaxAttempts < 1:
		return fmt.Errorf("MaxAttempts must be >= 1, got %d", c.MaxAttempts)
	case c.BaseDelay <= 0 || c.MaxDelay < c.BaseDelay:
		return fmt.Errorf("BaseDelay (%v) must be > 0 and <= MaxDelay (%v)", c.BaseDelay, c.MaxDelay)
	}
	return nil
}

// Naive is the baseline: what an application does without a gateway. It
// holds a semaphore of Concurrency slots, and retries 429, 5xx, 529 and
// connection errors up to MaxAttempts times, waiting the retry-after (or
// retry-after-ms) hint plus up to BaseDelay of jitter when the answer has
// one, or a full-jitter exponential backoff when it does not. A slot is
// held while waiting, as a simple retry loop inside a worker does. Safe for
// concurrent use.
type Naive struct {
	cfg  NaiveConfig
	sem  chan struct{}
	mu   sync.Mutex // guards rng
	rng  *rand.Rand
	stat NaiveStats
}

// NaiveStats counts what the naive client did.
type NaiveStats struct {
	// Requests is the number of Do calls; Attempts the HTTP requests sent;
	// Retries the attempts after the first.
	Requests int64 `json:"requests"`
	Attempts int64 `json:"attempts"`
	Retries  int64 `json:"retries"`
}

// NewNaive returns a Naive client for cfg (defaults applied, then
// validated).
func NewNaive(cfg NaiveConfig) (*Naive, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("naive client config: %w", err)
	}
	return &Naive{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), rng: rand.New(rand.NewPCG(cfg.Seed, 0x7a17e))}, nil
}

// Reply is the final answer the naive client got for one request.
type Reply struct {
	// Status is the last HTTP status; 0 when the last attempt got none.
	Status int
	// Header and Body are the last answer's, read in full.
	Header http.Header
	Body   []byte
	// Attempts is how many HTTP requests were sent.
	Attempts int
}

// Stats returns the counts so far.
func (n *Naive) Stats() NaiveStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stat
}

// Do sends body to url with header, retrying as described on Naive. The
// error is set when the last attempt got no HTTP answer or ctx ended; a
// final non-2xx answer is returned in Reply without an error.
func (n *Naive) Do(ctx context.Context, url string, header http.Header, body []byte) (Reply, error) {
	select {
	case n.sem <- struct{}{}:
	case <-ctx.Done():
		return Reply{}, fmt.Errorf("waiting for a naive client slot: %w", context.Cause(ctx))
	}
	defer func() { <-n.sem }()
	n.count(func(s *NaiveStats) { s.Requests++ })
	var last Reply
	var lastErr error
	for attempt := 1; ; attempt++ {
		n.count(func(s *NaiveStats) {
			s.Attempts++
			if attempt > 1 {
				s.Retries++
			}
		})
		last, lastErr = n.send(ctx, url, header, body)
		last.Attempts = attempt
		if ctx.Err() != nil {
			return last, fmt.Errorf("sending request: %w", context.Cause(ctx))
		}
		if lastErr == nil && !retryable(last.Status) {
			return last, nil
		}
		if attempt >= n.cfg.MaxAttempts {
			return last, lastErr
		}
		if err := clock.Sleep(ctx, n.cfg.Clock, n.delay(attempt, last.Header)); err != nil {
			return last, fmt.Errorf("waiting to retry: %w", err)
		}
	}
}

func (n *Naive) count(f func(*NaiveStats)) {
	n.mu.Lock()
	f(&n.stat)
	n.mu.Unlock()
}

func (n *Naive) send(ctx context.Context, url string, header http.Header, body []byte) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Reply{}, fmt.Errorf("building request: %w", err)
	}
	req.Header = header.Clone()
	resp, err := n.cfg.HTTPClient.Do(req)
	if err != nil {
		return Reply{}, fmt.Errorf("sending request: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if err != nil {
		return r, fmt.Errorf("reading response: %w", err)
	}
	return r, nil
}

// retryable reports whether the naive client retries an answer.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// delay is the wait before retry number attempt (1 = the first retry).
func (n *Naive) delay(attempt int, h http.Header) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if hint, ok := retryAfter(h); ok {
		return hint + time.Duration(n.rng.Int64N(int64(n.cfg.BaseDelay)+1))
	}
	ceiling := n.cfg.BaseDelay << min(attempt-1, 30)
	if ceiling <= 0 || ceiling > n.cfg.MaxDelay {
		ceiling = n.cfg.MaxDelay
	}
	return time.Duration(n.rng.Int64N(int64(ceiling) + 1))
}

// retryAfter reads retry-after-ms (milliseconds) or retry-after (whole or
// fractional seconds). An HTTP-date form or a malformed or negative value
// is ignored, as most hand-written clients do.
func retryAfter(h http.Header) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e6 {
			return time.Duration(s * float64(time.Second)), true
		}
	}
	return 0, false
}

// errIncomplete marks a 2xx answer whose stream did not finish.
var errIncomplete = errors.New("stream ended before its final event")
