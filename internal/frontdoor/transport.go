package frontdoor

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/provider"
)

// Transport is an http.RoundTripper that sends every request through a
// Dispatcher, so the official Go SDKs can use Sluice in-process:
//
//	client := anthropic.NewClient(option.WithHTTPClient(&http.Client{Transport: t}))
//
// The request's path and query go to the dispatcher's upstream whatever
// host the SDK aimed at, and the SDK's key is replaced by the upstream's.
// The request is built by Build exactly as the gateway builds it, with the
// InProcess caller named by X-Sluice-Client: the priority comes from the
// context (WithPriority), else X-Priority, else normal; the client from
// WithClient, else X-Sluice-Client; the deadline from X-Sluice-Deadline,
// else X-Stainless-Timeout. When Sluice refuses the request or gives up
// (shed, deadline, retries exhausted) the response is rendered by Render,
// as the gateway would answer, so the SDK does not retry on top of Sluice.
type Transport struct {
	d *dispatch.Dispatcher
}

// NewTransport returns a Transport over d. The caller starts and stops d.
func NewTransport(d *dispatch.Dispatcher) *Transport { return &Transport{d: d} }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	p := t.d.Protocol()
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		body = b
	}
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	caller := InProcess
	caller.Name = r.Header.Get(HeaderClient)
	reqID := NewRequestID()
	if e, ok := provider.EndpointOf(p, r.URL.Path); ok && e == provider.EndpointCountTokens {
		return t.countTokens(r, Input{Protocol: p, Method: r.Method, Path: path, Header: r.Header, Body: body,
			Caller: caller, Override: overrideFrom(r.Context()), Now: t.d.Clock().Now(), RequestID: reqID})
	}
	req, rerr := Build(Input{
		Protocol: p, Method: r.Method, Path: path, Header: r.Header, Body: body,
		Caller: caller, Override: overrideFrom(r.Context()), Now: t.d.Clock().Now(), RequestID: reqID,
	})
	if rerr != nil {
		pr, _ := ProblemFor(rerr)
		return ProblemResponse(r, p, reqID, pr), nil
	}
	resp, err := t.d.Do(r.Context(), req)
	if err != nil {
		if _, ok := errors.AsType[*dispatch.Error](err); ok {
			pr, _ := ProblemFor(err)
			return ProblemResponse(r, p, reqID, pr), nil
		}
		return nil, err
	}
	PrepareResponse(req, resp)
	resp.Request = r
	return resp.Response, nil
}

// countTokens sends a token-counting request on its own bucket
// (dispatch.Dispatcher.CountTokens): never through the messages queue.
func (t *Transport) countTokens(r *http.Request, in Input) (*http.Response, error) {
	req, rerr := BuildCountTokens(in)
	if rerr != nil {
		pr, _ := ProblemFor(rerr)
		return ProblemResponse(r, in.Protocol, in.RequestID, pr), nil
	}
	resp, err := t.d.CountTokens(r.Context(), req)
	if err != nil {
		if _, ok := errors.AsType[*dispatch.Error](err); ok {
			pr, _ := ProblemFor(err)
			return ProblemResponse(r, in.Protocol, in.RequestID, pr), nil
		}
		return nil, err
	}
	SetSluiceHeaders(resp.Header, resp.QueueWait, resp.Attempts)
	resp.Request = r
	return resp.Response, nil
}
