package dispatch

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// success wraps an admitted 2xx response so that reading it to the end (or
// closing it) reconciles the quota with the usage it reports, records the
// outcome and frees the concurrency slot. ahead holds stream bytes already
// read (replayed first); so is the stream's observer (nil for JSON).
func (d *Dispatcher) success(w *waiter, g grant, resp *http.Response, ahead *bytes.Buffer, so *provider.StreamObserver) *Response {
	b := &trackedBody{d: d, w: w, g: g, upstream: resp.Body, so: so, status: resp.StatusCode}
	if ahead != nil {
		b.replay = ahead.Bytes()
	}
	if so == nil {
		b.buf = usageBufs.Get().(*bytes.Buffer)
	}
	resp.Body = b
	if so != nil && !w.ticket {
		d.trackLive(b)
	}
	if so != nil {
		b.span = d.startStream(w, d.clk.Now())
	}
	return &Response{Response: resp, QueueWait: w.queueWait, Attempts: w.attempts,
		Outcome: llm.Outcome{Kind: llm.Success, Status: resp.StatusCode}, Protocol: d.cfg.Protocol, body: b,
		Upstream: d.cfg.Name, Key: g.key.cred.Load().fp}
}

// usageBufs recycles the buffers that keep JSON bodies for ParseUsage.
var usageBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putUsageBuf returns b to usageBufs, empty; one over 256 KiB is dropped.
func putUsageBuf(b *bytes.Buffer) {
	if b == nil || b.Cap() > 256<<10 { // keep the pool small
		return
	}
	b.Reset()
	usageBufs.Put(b)
}

// trackedBody is a Response's Body.
type trackedBody struct {
	d        *Dispatcher
	w        *waiter
	g        grant
	upstream io.ReadCloser
	so       *provider.StreamObserver
	status   int
	buf      *bytes.Buffer // JSON body kept for ParseUsage, nil once too big
	replay   []byte
	span     trace.Span // the stream's span (nil: not traced)

	mu       sync.Mutex
	finished bool
	ended    End   // set by finish
	cutErr   error // set by cut: what Read returns once the upstream is closed
}

// cut ends a live stream from Sluice's side (Dispatcher.Stop): the upstream
// is closed, so a blocked Read returns, and Read reports err.
func (b *trackedBody) cut(err error) {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	b.cutErr = err
	b.mu.Unlock()
	_ = b.upstream.Close()
}

// end returns what finish read, once it ran.
func (b *trackedBody) end() (End, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended, b.finished
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.finished {
		err := cmp.Or(b.cutErr, io.EOF)
		b.mu.Unlock()
		return 0, err
	}
	if b.cutErr != nil {
		err := b.cutErr
		b.finish(false, err)
		b.mu.Unlock()
		return 0, err
	}
	if len(b.replay) > 0 {
		n := copy(p, b.replay)
		b.replay = b.replay[n:]
		b.mu.Unlock()
		return n, nil
	}
	b.mu.Unlock()
	// Not under b.mu: a Close from another goroutine must be able to abort
	// a Read blocked on the upstream.
	n, err := b.upstream.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.finished {
		switch {
		case b.so != nil:
			_, _ = b.so.Write(p[:n])
		case b.buf != nil:
			if b.buf.Len()+n > UsageBufferDefault {
				putUsageBuf(b.buf)
				b.buf = nil
			} else {
				b.buf.Write(p[:n])
			}
		}
	}
	if b.cutErr != nil {
		err = b.cutErr
	}
	if err != nil {
		b.finish(errors.Is(err, io.EOF), err)
	}
	return n, err
}

// Close closes the upstream body and finishes the request if it was not
// read to the end.
func (b *trackedBody) Close() error {
	err := b.upstream.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finish(false, nil)
	return err
}

// finish runs once, with b.mu held: it reconciles the estimate with the
// reported usage, records the result and releases the slot.
func (b *trackedBody) finish(complete bool, readErr error) {
	if b.finished {
		return
	}
	b.finished = true
	d, w := b.d, b.w
	if b.so != nil && !w.ticket {
		d.untrackLive(b)
	}
	p := d.cfg.Protocol
	var usage llm.Usage
	var ok bool
	switch {
	case b.so != nil:
		usage, ok = b.so.Usage()
	case b.buf != nil && complete:
		usage, ok = provider.ParseUsage(p, b.buf.Bytes())
	}
	putUsageBuf(b.buf)
	b.buf = nil
	b.ended = End{Outcome: llm.Outcome{Kind: llm.Success, Status: b.status}, Usage: usage, HasUsage: ok}
	if b.span != nil {
		b.endSpan(complete, readErr)
	}
	var actual flow.Amount
	if ok {
		actual = actualAmount(p, usage)
		d.obs.Reconciled(w.req.Cost, usage)
	}
	result := flow.Healthy
	switch {
	case b.so != nil:
		if o, bad := b.so.StreamError(); bad {
			// A mid-stream error after content reached the client counts
			// only when it is evidence about the upstream's health
			// (provider.StreamErrorHealth: an overload or server error).
			result = flow.Neutral
			failed, overload := provider.StreamErrorHealth(p, o)
			if failed {
				result = flow.Failed
			}
			if overload {
				d.aimd.OnOverload()
			}
			o.Kind, o.Message = llm.StreamFail, "stream error: "+o.Message
			b.ended.Outcome = o
			b.ended.Terminal = true
		} else if !b.so.Done() {
			// A reset or EOF after content, a client that went away, a
			// stream cut at shutdown: no evidence about the upstream's
			// health either way.
			result = flow.Neutral
			b.ended.Outcome = llm.Outcome{Kind: llm.StreamFail, ErrorType: "stream_error", Message: "stream ended before its final event"}
		} else {
			b.ended.Terminal = true
		}
	case readErr != nil && !complete:
		result = flow.Failed
		b.ended.Outcome = llm.Outcome{Kind: llm.Transient, Message: "reading the upstream response: " + readErr.Error()}
	case !complete:
		result = flow.Neutral
		b.ended.Outcome = llm.Outcome{Kind: llm.Transient, Message: "the response was closed before its end"}
	}
	if ok && result == flow.Healthy {
		// A complete answer: its usage calibrates the next estimates.
		d.cal.observe(w.req.Cost, actual)
	}
	if result == flow.Healthy {
		d.mu.Lock()
		inflight := d.inflight
		d.mu.Unlock()
		d.aimd.OnSuccess(inflight)
	}
	if !w.ticket {
		end := GateEnd{Sent: true}
		if ok {
			end.Usage = &usage
		}
		d.gateDone(w, end)
	}
	if ok {
		d.releaseAnswered(w, b.g, result, actual)
		return
	}
	d.release(w, b.g, result, flow.Amount{})
}

// endSpan closes the stream's span with its usage and how it ended.
func (b *trackedBody) endSpan(complete bool, readErr error) {
	b.span.SetAttributes(attribute.Bool("sluice.complete", complete),
		attribute.Int64("gen_ai.usage.input_tokens", b.ended.Usage.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", b.ended.Usage.OutputTokens))
	if o, bad := b.so.StreamError(); bad {
		b.span.SetStatus(codes.Error, describe(o))
	} else if readErr != nil && !errors.Is(readErr, io.EOF) {
		b.span.SetStatus(codes.Error, readErr.Error())
	}
	b.span.End(trace.WithTimestamp(b.d.clk.Now()))
}
