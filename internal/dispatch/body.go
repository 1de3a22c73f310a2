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
	b := &trackedBody{d: d, w: w, g: g, upstream: resp.Body, so: so, status: resp.StatusCode, done: make(chan struct{}), call: c}
	if ahead != nil {
		b.replay = ahead.Bytes()
	}
	if so == nil {
		b.buf = usageBufs.Get().(*bytes.Buffer)
	}
	resp.Body = b
	if so != nil && !w.ticket {
		d.trackBody(b)
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
	g        admission
	upstream io.ReadCloser
	so       *provider.StreamObserver
	status   int
	buf      *bytes.Buffer // JSON body kept for ParseUsage, nil once too big
	replay   []byte
	span     trace.Span // the stream's span (nil: not traced)

	mu        sync.Mutex
	finished  bool
	ended     End           // set by finish
	cutErr    error         // set by cut: what Read returns once the upstream is closed
	abandoned bool          // closed by its reader before its end: being drained
	reading   bool          // a Read is blocked on the upstream (it starts the drain then)
	call      *callLink     // the upstream call's context, ended by finish
	done      chan struct{} // closed by finish
}

// cut ends a stream from Sluice's side (Dispatcher.Stop): the upstream
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
	if b.abandoned {
		b.mu.Unlock()
		return 0, errAbandoned
	}
	if len(b.replay) > 0 {
		n := copy(p, b.replay)
		b.replay = b.replay[n:]
		b.mu.Unlock()
		return n, nil
	}
	b.reading = true
	b.mu.Unlock()
	// Not under b.mu: a Close from another goroutine must be able to abort
	// a Read blocked on the upstream.
	n, err := b.upstream.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	if b.abandoned && err == nil && !b.finished {
		// Closed while this Read waited: the drain reads on from here.
		defer func() { go b.drainAbandoned() }()
	}
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
// read to the end. A stream closed before its end (its client left) is
// read on in the background instead, for up to the upstream's
// abandoned_stream_drain, to learn the usage the provider bills
// (drainAbandoned); Response.Ended says when it is settled.
func (b *trackedBody) Close() error {
	b.mu.Lock()
	if b.abandoned && !b.finished {
		b.mu.Unlock()
		return nil // being drained: it finishes on its own
	}
	if !b.finished && b.so != nil && b.cutErr == nil && b.d.cfg.AbandonedStreamDrain > 0 {
		b.abandoned = true
		if !b.reading { // else the Read blocked on the upstream starts it
			go b.drainAbandoned()
		}
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	err := b.upstream.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.so != nil && !b.finished && b.cutErr == nil {
		b.abandoned = true // cut at once (abandoned_stream_drain < 0)
	}
	b.finish(false, nil)
	return err
}

// errAbandoned is what a Read returns once its reader closed the stream.
var errAbandoned = errors.New("stream closed by its reader")

// AbandonedDrainBytes bounds what the engine reads of a stream its client
// left (with the upstream's abandoned_stream_drain).
const AbandonedDrainBytes = 8 << 20

// drainAbandoned reads an abandoned stream on to its end, or to its time
// or byte bound, feeding the stream's observer, then finishes it: with
// the provider's usage when the stream got to it, else cut and charged
// its worst case (finish). Dispatcher.Stop cuts it like any other.
func (b *trackedBody) drainAbandoned() {
	t := b.d.clk.NewTimer(b.d.cfg.AbandonedStreamDrain)
	defer t.Stop()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-t.C():
			_ = b.upstream.Close() // unblocks the Read below
		case <-stop:
		}
	}()
	buf := make([]byte, 32<<10)
	read := 0
	var err error
	for err == nil && read <= AbandonedDrainBytes {
		var n int
		n, err = b.upstream.Read(buf)
		read += n
		b.mu.Lock()
		if n > 0 && !b.finished {
			_, _ = b.so.Write(buf[:n])
		}
		b.mu.Unlock()
	}
	_ = b.upstream.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finish(errors.Is(err, io.EOF) && b.so.Done(), nil)
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
