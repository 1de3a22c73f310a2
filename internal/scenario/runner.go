package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// Outcome is one request as the load generator saw it.
type Outcome struct {
	Item Item
	// Start is when the request arrived (its scheduled arrival in an
	// open-loop run, when a worker took it in a closed-loop run) and End
	// when its answer was read in full, both from the start of the run.
	Start, End time.Duration
	// Status is the final HTTP status (0 without an answer).
	Status int
	// Attempts is how many upstream attempts were made, when known.
	Attempts int
	// Err is set when no complete answer arrived.
	Err error
}

// OK reports whether the request succeeded: a complete 2xx answer.
func (o Outcome) OK() bool { return o.Err == nil && o.Status >= 200 && o.Status < 300 }

// Latency is the time from arrival to the complete answer.
func (o Outcome) Latency() time.Duration { return o.End - o.Start }

// sender sends one item and reports its final status and attempts.
type sender func(ctx context.Context, it Item) (status, attempts int, err error)

// header returns the provider headers for an item's protocol with key.
func header(it Item, key string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	if it.Protocol == llm.OpenAI {
		h.Set("Authorization", "Bearer "+key)
	} else {
		h.Set("x-api-key", key)
		h.Set("anthropic-version", "2023-06-01")
	}
	if it.OutputTokens > 0 {
		h.Set(mock.HeaderOutputTokens, strconv.Itoa(it.OutputTokens))
	}
	return h
}

// complete checks a 2xx body: a stream must end with its final event.
func complete(it Item, status int, body []byte) error {
	if !it.Stream || status < 200 || status > 299 {
		return nil
	}
	final := []byte("event: message_stop")
	if it.Protocol == llm.OpenAI {
		final = []byte("data: [DONE]")
	}
	if !bytes.Contains(body, final) {
		return errIncomplete
	}
	return nil
}

// gatewaySender sends items through the gateway at base with X-Priority,
// and X-Sluice-Deadline when deadline is positive. It does not retry.
func gatewaySender(client *http.Client, base string, deadline time.Duration) sender {
	return func(ctx context.Context, it Item) (int, int, error) {
		upstream := anthropicUpstream
		if it.Protocol == llm.OpenAI {
			upstream = openAIUpstream
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+upstream+it.Path(), bytes.NewReader(it.Body()))
		if err != nil {
			return 0, 0, fmt.Errorf("building request: %w", err)
		}
		req.Header = header(it, clientKey)
		req.Header.Set(frontdoor.HeaderPriority, it.Priority.String())
		if deadline > 0 {
			req.Header.Set(frontdoor.HeaderDeadline, deadline.String())
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("calling gateway: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		attempts, _ := strconv.Atoi(resp.Header.Get(frontdoor.HeaderAttempts))
		if err != nil {
			return resp.StatusCode, attempts, fmt.Errorf("reading gateway answer: %w", err)
		}
		return resp.StatusCode, attempts, complete(it, resp.StatusCode, body)
	}
}

// naiveSender sends items straight to the mock at base with the naive
// client.
func naiveSender(n *Naive, base string) sender {
	return func(ctx context.Context, it Item) (int, int, error) {
		key := anthropicKey
		if it.Protocol == llm.OpenAI {
			key = openAIKey
		}
		r, err := n.Do(ctx, base+it.Path(), header(it, key), it.Body())
		if err != nil {
			return r.Status, r.Attempts, err
		}
		return r.Status, r.Attempts, complete(it, r.Status, r.Body)
	}
}

// runOpenLoop sends each item at its arrival time, whatever is still in
// flight, and returns the outcomes in item order.
func runOpenLoop(ctx context.Context, clk clock.Clock, items []Item, send sender) []Outcome {
	out := make([]Outcome, len(items))
	t0 := clk.Now()
	var wg sync.WaitGroup
	for i, it := range items {
		if d := t0.Add(it.At).Sub(clk.Now()); d > 0 {
			if clock.Sleep(ctx, clk, d) != nil {
				for j := i; j < len(items); j++ {
					out[j] = Outcome{Item: items[j], Start: items[j].At, End: items[j].At, Err: context.Cause(ctx)}
				}
				break
			}
		}
		wg.Go(func() {
			status, attempts, err := send(ctx, it)
			out[i] = Outcome{Item: it, Start: it.At, End: clk.Now().Sub(t0), Status: status, Attempts: attempts, Err: err}
		})
	}
	wg.Wait()
	return out
}

// runClosedLoop sends the items with workers goroutines, each taking the
// next item as soon as its previous one is answered.
func runClosedLoop(ctx context.Context, clk clock.Clock, items []Item, workers int, send sender) []Outcome {
	out := make([]Outcome, len(items))
	next := make(chan int)
	t0 := clk.Now()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				start := clk.Now().Sub(t0)
				status, attempts, err := send(ctx, items[i])
				out[i] = Outcome{Item: items[i], Start: start, End: clk.Now().Sub(t0), Status: status, Attempts: attempts, Err: err}
			}
		})
	}
	for i := range items {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
