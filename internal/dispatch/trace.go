package dispatch

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/llm"
)

// Span names, as docs/observability.md ("Traces") lists them. The
// request's own span is the caller's (the server's); the engine adds its
// children: each wait in the queue, each attempt, and a stream's body.
const (
	spanQueue   = "sluice.queue_wait"
	spanAttempt = "sluice.attempt"
	spanStream  = "sluice.stream"
)

// traceContext is the W3C trace-context propagator: an attempt's
// traceparent goes upstream so the provider's logs (and any proxy on the
// way) join the request's trace.
var traceContext propagation.TraceContext

// parentCtx is the context w's spans hang under: the caller's context of
// Do, else (a ticket) the attempt's own.
func (w *waiter) parentCtx(ctx context.Context) context.Context {
	if w.ctx != nil {
		return w.ctx
	}
	return ctx
}

// traceQueueWait records w's wait in the queue from w.waitFrom to end as
// a span (after the fact: a wait has no work of its own to trace). err,
// when not nil, is why the wait ended without an attempt.
func (d *Dispatcher) traceQueueWait(w *waiter, end time.Time, err error) {
	if w.waitFrom.IsZero() || w.ctx == nil {
		return
	}
	_, span := d.cfg.Tracer.Start(w.ctx, spanQueue, trace.WithTimestamp(w.waitFrom),
		trace.WithAttributes(attribute.String("sluice.priority", w.item.Class.String()),
			attribute.String("sluice.upstream", d.cfg.Name)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// startAttempt opens the span of w's next attempt on g's key; the
// returned context carries it to newUpstreamRequest, which sends it
// upstream as traceparent.
func (d *Dispatcher) startAttempt(ctx context.Context, w *waiter, g admission, now time.Time) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("sluice.upstream", d.cfg.Name),
		attribute.Int("sluice.attempt", w.attempts+1),
		attribute.String("sluice.priority", w.item.Class.String()),
	}
	if g.key != nil {
		attrs = append(attrs, attribute.String("sluice.key", g.key.cred.Load().fp))
	}
	if w.req != nil {
		if id := w.req.Header.Get("X-Sluice-Request-Id"); /* frontdoor.HeaderRequestID (frontdoor imports dispatch) */ id != "" {
			attrs = append(attrs, attribute.String("sluice.request_id", id))
		}
	}
	// The span hangs under the request's span; the returned context is
	// still the attempt's own (its cancellation).
	_, span := d.cfg.Tracer.Start(w.parentCtx(ctx), spanAttempt, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	return trace.ContextWithSpan(ctx, span), span
}

// endAttempt closes an attempt's span with what the exchange returned.
func (d *Dispatcher) endAttempt(span trace.Span, x exchanged, err error, now time.Time) {
	if !span.IsRecording() {
		span.End()
		return
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case x.resp != nil:
		span.SetAttributes(attribute.Int("http.response.status_code", x.resp.StatusCode),
			attribute.String("sluice.outcome", llm.Success.String()))
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", x.out.Status),
			attribute.String("sluice.outcome", x.out.Kind.String()))
		if x.out.HasRetryAfter {
			span.SetAttributes(attribute.Int64("sluice.retry_after_ms", x.out.RetryAfter.Milliseconds()))
		}
		span.SetStatus(codes.Error, describe(x.out))
	}
	span.End(trace.WithTimestamp(now))
}

// injectTrace writes ctx's span as the traceparent (and tracestate) of an
// upstream request; without a span it leaves the client's, if any, as is.
func injectTrace(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// startStream opens the span of a stream's body, from its first content
// to its end (trackedBody.finish ends it).
func (d *Dispatcher) startStream(w *waiter, now time.Time) trace.Span {
	if w.ctx == nil {
		return nil
	}
	_, span := d.cfg.Tracer.Start(w.ctx, spanStream, trace.WithTimestamp(now),
		trace.WithAttributes(attribute.String("sluice.upstream", d.cfg.Name),
			attribute.String("sluice.attempt", strconv.Itoa(w.attempts))))
	return span
}
