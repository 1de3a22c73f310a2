package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/opsview"
)

// Request outcomes, the values of sluice_requests_total's outcome label
// and of the request log's outcome.
const (
	outcomeSuccess       = "success"        // 2xx relayed
	outcomeUpstreamError = "upstream_error" // terminal upstream error passed through
	outcomeGaveUp        = "gave_up"        // Sluice shed or gave up (dispatch.Error)
	outcomeBadRequest    = "bad_request"    // rejected before scheduling
	outcomeUnauthorized  = "unauthorized"   // unknown or missing client key
	outcomeCanceled      = "canceled"       // client went away
	outcomeError         = "error"          // unexpected engine failure
	outcomeBudget        = "budget"         // refused by the client's spend budget (internal/admit)
	outcomeForbidden     = "forbidden"      // refused by the client's allowed upstreams, models or service tiers (internal/admit)
	outcomeAbandoned     = "abandoned"      // the client left a stream before its end
)

// priorityUnknown labels requests rejected before their class was known.
const priorityUnknown = "unknown"

// endpointOther labels a request to a path Sluice does not schedule
// (refused before it was passed through).
const endpointOther = "other"

func outcomeFor(status int) string {
	if status >= 200 && status < 300 {
		return outcomeSuccess
	}
	return outcomeUpstreamError
}

// requestLine is what the one log line of a proxied request says (msg
// "request"; the fields are listed in docs/observability.md, "Logs"). It is
// filled in as the request goes and written once, when it is answered.
// It never holds a key: the client is its configured name.
type requestLine struct {
	id        string
	upstream  string
	endpoint  string // the scheduled endpoint (provider.Endpoint's name); empty for a pass-through
	client    string
	priority  string
	outcome   string
	queue     time.Duration
	attempts  int
	start     time.Time
	tokensIn  int64
	tokensOut int64
	// tokensCached is the input the provider served from its cache.
	tokensCached int64
	traceID      trace.TraceID // zero unless traced (logged as trace_id)
	// spent is the answer's settled cost, logged as cost_usd
	// (admit.SpentOn); nil before an answer.
	spent func() float64
	// trail is every upstream the request was sent to, with its attempts
	// (served_by, tried).
	trail admit.Trail
	// abandoned is set for a stream its client left: the line waits for
	// its end (Response.Ended).
	abandoned *dispatch.Response
}

// outcome records the request's outcome in sluice_requests_total and in
// its log line: one place, so the two always agree.
func (s *Server) outcome(rl *requestLine, priority, outcome string) {
	if priority == "" {
		priority = priorityUnknown
	}
	s.view.CountRequest(rl.upstream, cmp.Or(rl.endpoint, endpointOther), priority, outcome, rl.client)
	rl.priority, rl.outcome = priority, outcome
}

// finished records a scheduled request once it is answered, for the
// dashboard: its latency per class and its client's usage.
func (s *Server) finished(rl *requestLine) {
	s.view.Answered(opsview.Answer{Upstream: rl.upstream, Client: rl.client, Priority: rl.priority, Start: rl.start,
		Succeeded: rl.outcome == outcomeSuccess, TokensIn: rl.tokensIn, TokensOut: rl.tokensOut,
		TokensCached: rl.tokensCached})
}

// fromResponse records what the engine says about a relayed answer:
// queue wait, attempts and, when its body was read to its end, the usage.
func (rl *requestLine) fromResponse(resp *dispatch.Response) {
	rl.queue, rl.attempts = resp.QueueWait, resp.Attempts
	if end, ok := resp.End(); ok && end.HasUsage {
		rl.tokensIn, rl.tokensOut = end.Usage.InputTokens, end.Usage.OutputTokens
		rl.tokensCached = end.Usage.CacheReadInputTokens
	}
}

// cost is what the request was charged, in US dollars.
func (rl *requestLine) cost() float64 {
	if rl.spent == nil {
		return 0
	}
	return rl.spent()
}

// logRequest writes rl at level, with status the one the client got.
func (s *Server) logRequest(ctx context.Context, level slog.Level, rl *requestLine, status int) {
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", rl.id),
		slog.String("upstream", rl.upstream),
		slog.String("endpoint", cmp.Or(rl.endpoint, endpointOther)),
		slog.String("client", rl.client),
		slog.String("priority", rl.priority),
		slog.Int("status", status),
		slog.String("outcome", rl.outcome),
		slog.Int64("queue_ms", rl.queue.Milliseconds()),
		slog.Int("attempts", rl.attempts),
		slog.Int64("duration_ms", s.clock.Now().Sub(rl.start).Milliseconds()),
		slog.Int64("tokens_in", rl.tokensIn),
		slog.Int64("tokens_out", rl.tokensOut),
		slog.Int64("tokens_cached", rl.tokensCached),
		slog.Any("cost_usd", admit.USD(rl.cost())),
	}
	if len(rl.trail.Legs) > 0 {
		attrs = append(attrs, slog.String("served_by", rl.trail.ServedBy()))
		if len(rl.trail.Legs) > 1 {
			attrs = append(attrs, slog.String("tried", rl.trail.String()))
		}
	}
	if rl.traceID.IsValid() {
		attrs = append(attrs, slog.String("trace_id", rl.traceID.String()))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
}

// statusWriter remembers the status written through it, for the log
// line. Unwrap lets http.ResponseController reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
