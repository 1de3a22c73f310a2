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
func (d *Dispatcher) success(w *waiter, g admission, resp *http.Response, ahead *bytes.Buffer, so *provider.StreamObserver, c *callLink) *Response {
	c.handOver()
	if resp.Request != nil && c.caller != nil {
		// Who reads the response judges its end by the caller's context
		// (the front door's stream body: the caller left, or the gateway
		// cut it), not by the call's, which the body's own end closes.
		resp.Request = resp.Request.WithContext(c.caller)
	}
	b := &trackedBody{d: d, w: w, g: g, upstream: resp.Body, so: so, status: resp.StatusCode, done: make(chan struct{}), call: c}
	if ahead != nil {
		b.replay = ahead.Bytes()
	}
	if so == nil {
		b.buf = usageBufs.Get().(*bytes.Buffer)
	}
	resp.Body = b
	if so != nil {
		// A Responses stream named its response in its first event, read
		// ahead before any byte reached the caller.
		d.noteResponse(so.ResponseID(), g.key)
		b.span = d.startStream(w, d.clk.Now())
		if !w.ticket {
			d.trackBody(b)
		}
		b.startPump()
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

// trackedBody is a Response's Body. A JSON body is read in its reader's
// goroutine; an event stream is read by its own goroutine (pump, in
// stream_pump.go), which hands the bytes on through a pipe and reads on
// past a reader that leaves (the usage the provider bills).
type trackedBody struct {
	d        *Dispatcher
	w        *waiter
	g        admission
	upstream io.ReadCloser
	so       *provider.StreamObserver
	status   int
	buf      *bytes.Buffer // JSON body kept for ParseUsage, nil once too big
	replay   []byte
	span     trace.Span // the stream's span (nil: not traced)

	// A stream's pipe from its pump to its reader; nil for JSON.
	pr       *io.PipeReader
	pw       *io.PipeWriter
	pumpDone chan struct{} // closed when the pump has finished

	mu        sync.Mutex
	finished  bool
	ended     End           // set by finish
	cutErr    error         // set by cut: what Read returns once the upstream is closed
	abandoned bool          // closed by its reader before its end: being drained
	closed    bool          // Close ran
	call      *callLink     // the upstream call's context, ended by finish
	done      chan struct{} // closed by finish
}

// cut ends a stream from Sluice's side (Dispatcher.Stop): the upstream
// is closed, so the pump's Read returns, and the reader gets err.
func (b *trackedBody) cut(err error) {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	b.cutErr = err
	b.mu.Unlock()
	if b.pr != nil {
		_ = b.pr.CloseWithError(err)
	}
	_ = b.upstream.Close()
}

// end returns what finish read, once it ran.
func (b *trackedBody) end() (End, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended, b.finished
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if b.pr != nil {
		return b.readStream(p)
	}
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
	b.mu.Unlock()
	// Not under b.mu: a Close from another goroutine must be able to abort
	// a Read blocked on the upstream.
	n, err := b.upstream.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.finished && b.buf != nil {
		if b.buf.Len()+n > UsageBufferDefault {
			putUsageBuf(b.buf)
			b.buf = nil
		} else {
			b.buf.Write(p[:n])
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

// Close ends the body for its reader. A JSON body not read to its end is
// finished at once. A stream closed before its end (its client left) is
// read on by its pump for up to the upstream's abandoned_stream_drain, to
// learn the usage the provider bills; Response.Ended says when it is
// settled. With the drain off (or cut by Stop) it is cut at once.
func (b *trackedBody) Close() error {
	if b.pr != nil {
		return b.closeStream()
	}
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
		d.untrackBody(b)
	}
	p := d.cfg.Protocol
	var usage llm.Usage
	var ok bool
	switch {
	case b.so != nil && b.abandoned && !complete:
		// Cut before its end: what it reported so far is not what the
		// provider bills. No usage: the reservation stands (the engine's
		// and the budget's worst case).
	case b.so != nil:
		usage, ok = b.so.Usage()
	case b.buf != nil && complete:
		usage, ok = provider.ParseUsage(p, b.buf.Bytes())
		if w.req.Endpoint == provider.EndpointResponses {
			// Before the reader's last Read returns: it learns the id
			// only after.
			d.noteResponse(provider.ResponseID(b.buf.Bytes()), b.g.key)
		}
	}
	putUsageBuf(b.buf)
	b.buf = nil
	b.ended = End{Outcome: llm.Outcome{Kind: llm.Success, Status: b.status}, Usage: usage, HasUsage: ok, Abandoned: b.abandoned}
	defer close(b.done)
	defer b.call.end()
	if b.span != nil {
		b.endSpan(complete, readErr)
	}
	var actual flow.Amount
	if ok {
		actual = actualAmount(p, w.req.Cost.Model, usage)
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
		// A complete answer: its usage calibrates the next estimates
		// (against the whole prompt, cached or not), and says what the
		// provider now holds in the key's cache.
		d.cal.observe(w.req.Cost, promptAmount(p, usage))
		d.noteCached(b.g.key, w, usage, w.sentAt)
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
