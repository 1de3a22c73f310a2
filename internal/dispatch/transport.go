package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Headers a caller may use to steer a request; the dispatcher never sends
// them upstream.
const (
	// PriorityHeader carries the class: critical, high, normal, low or 0–3.
	PriorityHeader = "X-Priority"
	// ClientHeader names the caller for fairness inside a class.
	ClientHeader = "X-Sluice-Client"
)

type ctxKey int

const (
	priorityKey ctxKey = iota
	clientKey
)

// WithPriority returns ctx carrying priority p for requests sent through a
// Transport. It takes precedence over the X-Priority header.
func WithPriority(ctx context.Context, p llm.Priority) context.Context {
	return context.WithValue(ctx, priorityKey, p)
}

// WithClient returns ctx naming the client for fairness inside a class. It
// takes precedence over the X-Sluice-Client header.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey, client)
}

// Transport is an http.RoundTripper that sends every request through a
// Dispatcher, so the official Go SDKs can use Sluice in-process:
//
//	client := anthropic.NewClient(option.WithHTTPClient(&http.Client{Transport: t}))
//
// The request's path and query go to the dispatcher's upstream whatever
// host the SDK aimed at, and the SDK's key is replaced by the upstream's.
// The priority comes from the context (WithPriority), else the X-Priority
// header, else normal; the client from WithClient, else X-Sluice-Client.
// When Sluice gives up (shed, deadline, retries exhausted) the response is
// a provider-shaped error with retry-after, retry-after-ms and
// x-should-retry: false, so the SDK does not retry on top of Sluice.
type Transport struct {
	d *Dispatcher
}

// NewTransport returns a Transport over d. The caller starts and stops d.
func NewTransport(d *Dispatcher) *Transport { return &Transport{d: d} }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.d.cfg.Protocol
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		body = b
	}
	cost, err := provider.Estimate(p, body)
	if err != nil {
		var re *provider.RequestError
		if errors.As(err, &re) {
			return errorResponse(req, p, re.Status, re.Type, re.Message, 0), nil
		}
		return errorResponse(req, p, http.StatusBadRequest, "", err.Error(), 0), nil
	}
	prio := llm.Normal
	if v, ok := req.Context().Value(priorityKey).(llm.Priority); ok && v.Valid() {
		prio = v
	} else if h := req.Header.Get(PriorityHeader); h != "" {
		if prio, err = llm.ParsePriority(h); err != nil {
			return errorResponse(req, p, http.StatusBadRequest, "", PriorityHeader+": "+err.Error(), 0), nil
		}
	}
	client, _ := req.Context().Value(clientKey).(string)
	if client == "" {
		client = req.Header.Get(ClientHeader)
	}
	path := req.URL.EscapedPath()
	if req.URL.RawQuery != "" {
		path += "?" + req.URL.RawQuery
	}
	// Ask an OpenAI stream for its usage so the quota is reconciled, and
	// strip that chunk again for a caller that did not ask for it.
	var stripUsage bool
	if cost.Stream {
		body, stripUsage = provider.EnsureStreamUsage(p, body)
	}
	resp, err := t.d.Do(req.Context(), &Request{
		Method:   req.Method,
		Path:     path,
		Header:   req.Header,
		Body:     body,
		Priority: prio,
		Client:   client,
		Cost:     cost,
	})
	var de *Error
	switch {
	case errors.As(err, &de):
		return errorResponse(req, p, de.Status, de.Type, de.Message, de.RetryAfter), nil
	case err != nil:
		return nil, err
	}
	resp.Request = req
	if stripUsage && resp.StatusCode/100 == 2 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{provider.NewUsageStripper(resp.Body), resp.Body}
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	return resp.Response, nil
}

// errorResponse synthesises the provider's error shape for an answer
// Sluice gives itself.
func errorResponse(req *http.Request, p llm.Protocol, status int, errType, msg string, retryAfter time.Duration) *http.Response {
	body := provider.ErrorBody(p, status, errType, msg, "")
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Should-Retry", "false")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
		h.Set("Retry-After-Ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
