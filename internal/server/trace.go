package server

import (
	"cmp"
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName names the gateway's instrumentation scope.
const tracerName = "github.com/sluicehq/sluice"

// WithTracerProvider sets where the gateway's spans go (sluice serve
// builds an OTLP exporter from the OTEL_* environment variables).
// Defaults to a no-op provider: no spans, but an incoming traceparent
// still goes upstream unchanged.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// tracer is the server's tracer from its options.
func (o options) tracerOrNoop() trace.Tracer {
	if o.tracer == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	return o.tracer.Tracer(tracerName)
}

// startRequestSpan opens a proxied request's span (kind server), under
// the client's traceparent when it sent one. The engine hangs the queue
// wait, attempt and stream spans under it.
func (s *Server) startRequestSpan(r *http.Request, rl *requestLine) (context.Context, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return s.tracer.Start(ctx, r.Method+" /"+rl.upstream+"/*", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(rl.start),
		trace.WithAttributes(attribute.String("sluice.request_id", rl.id), attribute.String("sluice.upstream", rl.upstream),
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
}

// endRequestSpan closes it with what the log line says.
func (s *Server) endRequestSpan(span trace.Span, rl *requestLine, status int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("sluice.client", rl.client), attribute.String("sluice.priority", rl.priority),
			attribute.String("sluice.endpoint", cmp.Or(rl.endpoint, endpointOther)),
			attribute.String("sluice.outcome", rl.outcome), attribute.Int("http.response.status_code", status),
			attribute.Int64("sluice.queue_ms", rl.queue.Milliseconds()), attribute.Int("sluice.attempts", rl.attempts),
			attribute.Int64("gen_ai.usage.input_tokens", rl.tokensIn), attribute.Int64("gen_ai.usage.output_tokens", rl.tokensOut))
		if status >= 500 || status == 0 {
			span.SetStatus(codes.Error, rl.outcome)
		}
	}
	span.End(trace.WithTimestamp(s.clock.Now()))
}
