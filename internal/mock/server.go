package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// Server is a mock LLM provider. Create it with New; serve it with Start or
// mount Handler in an httptest.Server. It is safe for concurrent use.
type Server struct {
	cfg    Config
	clock  clock.Clock
	quotas *quotas
	faults *faultEngine
	stats  *statsBook
	// responses are the stored Responses API responses, per key.
	responses *responseStore
	// batches are the Batch APIs' batches and files (batch.go).
	batches *batchStore
	// revoked are the keys revoked at run time (keys.go).
	revoked revocations
	// mux routes requests (routes.go).
	mux *http.ServeMux

	life   lifecycle.Base // Start and Stop; runs the HTTP server
	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelCauseFunc
}

// errStopped is the cause given to in-flight requests when Stop gives up
// waiting for them.
var errStopped = errors.New("mock server stopped")

// New returns a Server for cfg (defaults applied, then validated).
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mock config: %w", err)
	}
	c := cfg.Clock
	q := &quotas{limits: cfg.limits(), burstSeconds: cfg.BurstSeconds,
		realtime: cfg.OTPMMode == OTPMRealtime, countRejected: *cfg.CountRejected,
		accountOf: map[string]string{}, accountLimits: map[string]Limits{}}
	for name, a := range cfg.Accounts {
		q.accountLimits[name] = a.Limits
		for _, k := range a.Keys {
			q.accountOf[k] = name
		}
	}
	s := &Server{
		cfg:    cfg,
		clock:  c,
		quotas: q,
		faults: newFaultEngine(cfg.Faults, cfg.Seed, c.Now()),
		stats:  newStatsBook(),

		responses: newResponseStore(),
		batches:   newBatchStore(),
	}
	s.mux = s.newMux()
	return s, nil
}

// Limits returns the effective per-minute limits (preset plus overrides).
func (s *Server) Limits() Limits { return s.quotas.limits }

// Start listens on Config.Listen and serves in the background until Stop
// (lifecycle.Base: a second Start answers lifecycle.ErrStarted, a Start
// after Stop lifecycle.ErrStopped). Outage windows are timed from the
// moment Start is called.
func (s *Server) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(run context.Context) error {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
		}
		base, cancel := context.WithCancelCause(run)
		srv := &http.Server{
			Handler:           s.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return base },
		}
		s.mu.Lock()
		s.srv, s.ln, s.cancel = srv, ln, cancel
		s.mu.Unlock()
		s.faults.mu.Lock()
		s.faults.start = s.clock.Now()
		s.faults.nextFlip = time.Time{}
		s.faults.mu.Unlock()
		s.life.Go(func() {
			_ = srv.Serve(ln) // returns http.ErrServerClosed after Shutdown
		})
		return nil
	})
}

// Addr returns the address the server listens on ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL returns "http://" + Addr(), the base URL for SDKs ("" before Start).
func (s *Server) URL() string {
	if a := s.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Stop stops accepting connections and waits for requests in flight until
// ctx is done, then cancels them and closes every connection. It is
// idempotent and safe before Start.
func (s *Server) Stop(ctx context.Context) error {
	return s.life.Stop(ctx, func(ctx context.Context) error {
		s.mu.Lock()
		srv, cancel := s.srv, s.cancel
		s.mu.Unlock()
		err := srv.Shutdown(ctx)
		if err != nil {
			cancel(errStopped)
			_ = srv.Close()
			err = fmt.Errorf("stopping mock server: %w", err)
		}
		cancel(errStopped)
		// Serve returns at once after Shutdown or Close: wait for it
		// whatever is left of ctx.
		_ = s.life.Halt(context.WithoutCancel(ctx))
		return err
	})
}

// Stats returns the statistics collected since New or the last reset, with
// the batch usage billed by now on the mock's clock.
func (s *Server) Stats() Stats {
	st := s.stats.snapshot()
	for key, b := range s.batches.stats(s.cfg.Batch, s.clock.Now()) {
		ks := st.Keys[key]
		ks.Batch = b
		st.Keys[key] = ks
		st.Overall.Batch.merge(b)
	}
	return st
}

// ResetStats clears the statistics (buckets are untouched).
func (s *Server) ResetStats() { s.stats.reset() }

// Reset clears the statistics and refills every bucket, forgetting every API
// key, the simulated prompt caches and the stored responses (what POST
// /mock/reset does).
func (s *Server) Reset() {
	s.stats.reset()
	s.quotas.reset()
	s.responses.reset()
	s.batches.reset()
}

// SetFaults replaces the injected faults at run time, restarting the random
// sequence and the storm process; outage offsets stay relative to Start.
func (s *Server) SetFaults(f Faults) error {
	f = f.WithDefaults()
	if err := f.validate(); err != nil {
		return fmt.Errorf("setting faults: %w", err)
	}
	s.faults.mu.Lock()
	start := s.faults.start
	s.faults.mu.Unlock()
	s.faults.set(f, start)
	return nil
}

// Faults returns the faults in effect.
func (s *Server) Faults() Faults { return s.faults.get() }

// Handler returns the HTTP handler serving the mock's endpoints.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

const (
	protoAnthropic = "anthropic"
	protoOpenAI    = "openai"
)

// protocolOf guesses which protocol a request speaks, for errors on paths
// that belong to neither: OpenAI for OpenAI-looking paths or a bearer token
// without x-api-key, Anthropic otherwise.
func protocolOf(r *http.Request) string {
	p := r.URL.Path
	for _, frag := range []string{"/chat/", "/completions", "/responses", "/embeddings", "/models"} {
		if strings.Contains(p, frag) {
			return protoOpenAI
		}
	}
	if r.Header.Get("x-api-key") == "" && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return protoOpenAI
	}
	return protoAnthropic
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, status int) {
	x := s.exchange(w, r, protocolOf(r))
	if status == http.StatusMethodNotAllowed {
		x.fail(&apiError{status: status, typ: "invalid_request_error",
			message: fmt.Sprintf("Method %s not allowed for %s", r.Method, r.URL.Path)}, nil)
		return
	}
	if x.proto == protoOpenAI {
		x.fail(&apiError{status: status, typ: "invalid_request_error",
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)}, nil)
		return
	}
	x.fail(&apiError{status: status, typ: "not_found_error", message: "The requested resource could not be found."}, nil)
}

// exchange is one request being answered.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	proto string
	key   string
	id    string
	now   time.Time
	rl    http.Header // rate-limit headers to send
}

func (s *Server) exchange(w http.ResponseWriter, r *http.Request, proto string) *exchange {
	return &exchange{s: s, w: w, r: r, proto: proto, id: newID("req_"), now: s.clock.Now()}
}

// auth reads the API key; false means a 401 was sent.
func (x *exchange) auth() bool {
	if x.proto == protoAnthropic {
		// x-api-key, or a bearer token as anthropic-sdk-go v2's WithAPIKey sends.
		x.key = x.r.Header.Get("x-api-key")
		if k, ok := strings.CutPrefix(x.r.Header.Get("Authorization"), "Bearer "); ok && x.key == "" {
			x.key = strings.TrimSpace(k)
		}
		if x.key == "" {
			x.fail(&apiError{status: http.StatusUnauthorized, typ: "authentication_error",
				message: "x-api-key header is required"}, nil)
			return false
		}
		return true
	}
	a := x.r.Header.Get("Authorization")
	if k, ok := strings.CutPrefix(a, "Bearer "); ok && strings.TrimSpace(k) != "" {
		x.key = strings.TrimSpace(k)
		return true
	}
	x.fail(&apiError{status: http.StatusUnauthorized, typ: "invalid_request_error",
		message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."}, nil)
	return false
}

// body reads the request body within the size limit; nil means an error
// answer was sent.
func (x *exchange) body() []byte { return x.bodyLimit(x.s.cfg.MaxBodyBytes) }

// bodyLimit reads the request body within limit bytes; nil means an error
// answer was sent.
func (x *exchange) bodyLimit(limit int64) []byte {
	tooLarge := func() {
		msg := "Request exceeds the maximum allowed number of bytes."
		typ := "request_too_large"
		if x.proto == protoOpenAI {
			typ = "invalid_request_error"
		}
		x.fail(&apiError{status: http.StatusRequestEntityTooLarge, typ: typ, message: msg}, nil)
	}
	if x.r.ContentLength > limit {
		tooLarge()
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(x.w, x.r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			tooLarge()
			return nil
		}
		x.fail(invalid("reading request body: %v", err), nil)
		return nil
	}
	return b
}

// commonHeaders sets the id, organization and rate-limit headers.
func (x *exchange) commonHeaders(contentType string) {
	h := x.w.Header()
	for k, v := range x.rl {
		h[k] = v
	}
	h.Set("Content-Type", contentType)
	if x.proto == protoAnthropic {
		h.Set("request-id", x.id)
		h.Set("anthropic-organization-id", x.s.cfg.OrgID)
		return
	}
	h.Set("x-request-id", x.id)
	h.Set("openai-organization", openAIOrg(x.s.cfg.OrgID))
	h.Set("openai-version", "2020-10-01")
	h.Set("openai-processing-ms", strconv.FormatInt(max(0, x.s.clock.Now().Sub(x.now).Milliseconds()), 10))
}

// fail sends an error answer in the protocol's envelope, with extra headers.
func (x *exchange) fail(e *apiError, extra http.Header) {
	x.commonHeaders("application/json")
	for k, v := range extra {
		x.w.Header()[k] = v
	}
	var body any
	if x.proto == protoAnthropic {
		body = anthropicErrorBody(x.id, e, nil)
	} else {
		body = openAIErrorBody(e)
	}
	writeJSON(x.w, e.status, body)
	x.s.stats.status(x.key, e.status)
}

// sendFault answers with an injected fault.
func (x *exchange) sendFault(f fault) {
	faults := x.s.faults.get()
	extra := http.Header{}
	if faults.ShouldRetry {
		extra.Set("x-should-retry", strconv.FormatBool(f.kind != faultSpendCap))
	}
	switch f.kind {
	case faultReset:
		x.reset()
	case faultSpendCap:
		if x.proto == protoAnthropic {
			x.commonHeaders("application/json")
			for k, v := range extra {
				x.w.Header()[k] = v
			}
			regain := firstOfNextMonth(x.now)
			e := &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", message: "You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on " + regain.Format("2006-01-02") + " at 00:00 UTC."}
			writeJSON(x.w, e.status, anthropicErrorBody(x.id, e, map[string]string{"error_code": "enforced_spend_limit_reached"}))
			x.s.stats.status(x.key, e.status)
			return
		}
		x.fail(&apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: "insufficient_quota",
			message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}, extra)
	case faultOverload:
		if faults.OverloadRetryAfter > 0 {
			extra.Set("retry-after", retryAfterSeconds(faults.OverloadRetryAfter))
		}
		if x.proto == protoAnthropic {
			x.fail(&apiError{status: 529, typ: "overloaded_error", message: "Overloaded"}, extra)
			return
		}
		x.fail(&apiError{status: http.StatusServiceUnavailable, typ: "server_error",
			message: "The engine is currently overloaded, please try again later"}, extra)
	case faultStatus:
		if f.html {
			x.edgeHTML(f.status)
			return
		}
		x.fail(serverError(x.proto, f.status), extra)
	case faultNone:
		// Callers send a fault only when one was drawn; nothing to inject.
	}
}

func serverError(proto string, status int) *apiError {
	type msg struct{ typ, text string }
	anth := map[int]msg{500: {"api_error", "Internal server error"}, 502: {"api_error", "Bad gateway"},
		503: {"api_error", "Service unavailable"}, 504: {"timeout_error", "Request timed out"}, 529: {"overloaded_error", "Overloaded"}}
	oai := map[int]msg{500: {"server_error", "The server had an error while processing your request. Sorry about that!"},
		502: {"server_error", "Bad gateway."}, 503: {"server_error", "The engine is currently overloaded, please try again later"},
		504: {"server_error", "Gateway timeout."}}
	table := anth
	if proto == protoOpenAI {
		table = oai
	}
	m, ok := table[status]
	if !ok {
		m = msg{"api_error", http.StatusText(status)}
		if proto == protoOpenAI {
			m.typ = "server_error"
		}
	}
	return &apiError{status: status, typ: m.typ, message: m.text}
}

// edgeHTML answers like a CDN in front of the API: an HTML page, no
// request id, no rate-limit headers.
func (x *exchange) edgeHTML(status int) {
	text := fmt.Sprintf("%d %s", status, http.StatusText(status))
	h := x.w.Header()
	h.Set("Content-Type", "text/html")
	h.Set("Server", "cloudflare")
	x.w.WriteHeader(status)
	_, _ = fmt.Fprintf(x.w, "<html>\r\n<head><title>%s</title></head>\r\n<body>\r\n<center><h1>%s</h1></center>\r\n<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n", text, text)
	x.s.stats.status(x.key, status)
}

// reset closes the connection with a TCP RST and no answer.
func (x *exchange) reset() {
	hj, ok := x.w.(http.Hijacker)
	if !ok {
		x.edgeHTML(http.StatusBadGateway) // e.g. HTTP/2: cannot hijack
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		x.edgeHTML(http.StatusBadGateway)
		return
	}
	// Counted before the close: a client that sees the reset then finds it
	// in the stats (counted after, a test reading them at once saw 0).
	x.s.stats.status(x.key, 0)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func firstOfNextMonth(now time.Time) time.Time {
	u := now.UTC()
	return time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding response"}`)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// sleep waits d on the server's clock; false means the client went away.
func (x *exchange) sleep(d time.Duration) bool {
	return d <= 0 || clock.Sleep(x.r.Context(), x.s.clock, d) == nil
}

// flush pushes buffered stream bytes to the client.
func flush(w http.ResponseWriter) {
	_ = http.NewResponseController(w).Flush()
}
