package batches

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Sentinels the router branches on; every error of a Client call wraps
// one of them (a *Error, or a local check's error).
var (
	// ErrLimit: the provider refused for its limits (a 429: batch
	// queue, enqueued tokens, rate limit). Error.Outcome carries the
	// retry hint when the provider sent one; a batch too big for the
	// limit alone never fits (OpenAI reports the limit in Batch.Errors).
	ErrLimit = errors.New("provider batch limit exceeded")
	// ErrNotFound: no such batch or file (404), or results asked before
	// the batch ended.
	ErrNotFound = errors.New("provider batch not found")
	// ErrInvalid: the request was refused as malformed (400, 413, 422),
	// or failed the client's own checks before it was sent, or an OpenAI
	// batch failed its validation.
	ErrInvalid = errors.New("invalid provider batch request")
	// ErrUnavailable: the provider is overloaded or failing (5xx, 529, a
	// transport error): try again later.
	ErrUnavailable = errors.New("provider batch API unavailable")
	// ErrQuota: a terminal billing condition (spend cap, no credit).
	ErrQuota = errors.New("provider quota exhausted")
	// ErrRejected: any other refusal (401, 403, …): the key is not
	// allowed to.
	ErrRejected = errors.New("provider batch request rejected")
)

// Error is a provider's refusal of a Batch API call.
type Error struct {
	// Op names the call ("creating the batch", …).
	Op string
	// Outcome is the provider's answer classified (status, error type
	// and code, message, retry hint).
	Outcome llm.Outcome
	// Errors are an OpenAI batch's validation errors, when it failed.
	Errors []llm.OpenAIBatchError
	kind   error
}

func (e *Error) Error() string {
	msg := e.Outcome.Message
	if msg == "" && len(e.Errors) > 0 {
		msg = e.Errors[0].Code + ": " + e.Errors[0].Message
	}
	if e.Outcome.Status != 0 {
		return fmt.Sprintf("%s: %v (%d %s): %s", e.Op, e.kind, e.Outcome.Status, e.Outcome.ErrorType, msg)
	}
	return fmt.Sprintf("%s: %v: %s", e.Op, e.kind, msg)
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.kind }

// RetryAfter is the provider's retry hint, if it sent one.
func (e *Error) RetryAfter() (time.Duration, bool) {
	return e.Outcome.RetryAfter, e.Outcome.HasRetryAfter
}

// sentinelFor maps a classified answer to its sentinel.
func sentinelFor(o llm.Outcome) error {
	switch {
	case o.Kind == llm.Rate:
		return ErrLimit
	case o.Kind == llm.Overload || o.Kind == llm.Transient || o.Kind == llm.StreamFail:
		return ErrUnavailable
	case o.Kind == llm.Quota:
		return ErrQuota
	case o.Status == http.StatusNotFound:
		return ErrNotFound
	case o.Status == http.StatusBadRequest || o.Status == http.StatusRequestEntityTooLarge || o.Status == http.StatusUnprocessableEntity:
		return ErrInvalid
	}
	return ErrRejected
}

// Config configures a Client.
type Config struct {
	// Protocol is llm.Anthropic (Message Batches) or llm.OpenAI (Files
	// and Batch). Required.
	Protocol llm.Protocol
	// BaseURL is the provider's root URL, without /v1 (as an upstream's
	// base_url). Required.
	BaseURL string
	// APIKey is the upstream's key. Defaults to none (no auth header).
	APIKey string
	// HTTPClient sends the requests. Defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Clock reads retry hints given as dates. Defaults to the wall clock.
	Clock clock.Clock
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	c.Clock = clock.Or(c.Clock)
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Protocol != llm.Anthropic && c.Protocol != llm.OpenAI {
		errs = append(errs, fmt.Errorf("protocol: want %q or %q, got %q", llm.Anthropic, llm.OpenAI, c.Protocol))
	}
	if !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		errs = append(errs, fmt.Errorf("base_url: want an http(s) URL, got %q", c.BaseURL))
	}
	return errors.Join(errs...)
}

// Client is one upstream's Batch API. It is safe for concurrent use.
type Client struct{ cfg Config }

// New returns a Client for cfg (defaults applied, then validated).
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("batch client config: %w", err)
	}
	return &Client{cfg: cfg}, nil
}

// Protocol is the protocol the client speaks.
func (c *Client) Protocol() llm.Protocol { return c.cfg.Protocol }

// request is one exchange with the provider.
type request struct {
	op, method, path string
	body             io.Reader
	contentType      string // "" for JSON when body is set
}

// send does r and returns the response when it is a 2xx; any other answer
// is read and returned as an *Error. The caller closes the body.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, c.cfg.BaseURL+r.path, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	provider.SetUpstreamHeaders(req.Header, c.cfg.Protocol, c.cfg.APIKey, false)
	switch {
	case r.contentType != "":
		req.Header.Set("Content-Type", r.contentType)
	case r.body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", r.op, context.Cause(ctx))
		}
		o := provider.ClassifyTransportError(err)
		if o.Message == "" {
			o.Message = err.Error()
		}
		return nil, &Error{Op: r.op, Outcome: o, kind: ErrUnavailable}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	o := provider.Classify(c.cfg.Protocol, resp.StatusCode, resp.Header, body, c.cfg.Clock.Now())
	return nil, &Error{Op: r.op, Outcome: o, kind: sentinelFor(o)}
}

// call does r and decodes a JSON answer into v.
func (c *Client) call(ctx context.Context, r request, v any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", r.op, err)
	}
	return nil
}

// Line is one request of a batch.
type Line struct {
	// CustomID names the request in the results; unique in the batch
	// (Anthropic: 1 to 64 letters, digits, '_' or '-').
	CustomID string
	// Body is the request: Anthropic Messages params, or the OpenAI
	// endpoint's body. A JSON object, without "stream": true.
	Body json.RawMessage
}

// CreateParams describe a batch to submit.
type CreateParams struct {
	// Endpoint is the path every line goes to: /v1/messages for
	// Anthropic (the default there); for OpenAI /v1/chat/completions
	// (the default), /v1/responses or /v1/embeddings.
	Endpoint string
	// Lines are the requests. At least one.
	Lines []Line
	// Metadata is attached to an OpenAI batch (at most 16 pairs).
	Metadata map[string]string
}

// checkLines refuses what no provider accepts, before anything is sent.
func checkLines(lines []Line) error {
	if len(lines) == 0 {
		return fmt.Errorf("%w: a batch needs at least one line", ErrInvalid)
	}
	seen := make(map[string]int, len(lines))
	for i, l := range lines {
		if l.CustomID == "" {
			return fmt.Errorf("%w: line %d has no custom_id", ErrInvalid, i)
		}
		if j, dup := seen[l.CustomID]; dup {
			return fmt.Errorf("%w: lines %d and %d share custom_id %q", ErrInvalid, j, i, l.CustomID)
		}
		seen[l.CustomID] = i
		if b := bytes.TrimSpace(l.Body); len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			return fmt.Errorf("%w: line %q: the body must be a JSON object", ErrInvalid, l.CustomID)
		}
	}
	return nil
}

// Counts are a batch's requests by outcome. Anthropic reports only
// Processing until the batch has ended; OpenAI reports Succeeded (its
// completed) and Errored (its failed) as they happen, and no canceled or
// expired counts (those lines are in Total and in the error file).
type Counts struct {
	Total      int
	Processing int
	Succeeded  int
	Errored    int
	Canceled   int
	Expired    int
}

// Batch is a provider batch's state.
type Batch struct {
	// ID is the provider's batch id (msgbatch_…, batch_…).
	ID string
	// Status is the provider's own status (Anthropic processing_status,
	// OpenAI status).
	Status string
	// Ended reports that the batch will change no more: its results can
	// be read (an OpenAI batch that failed has none).
	Ended bool
	// Counts are its requests by outcome.
	Counts Counts
	// CreatedAt and ExpiresAt bound its completion window; EndedAt is
	// zero until it ends. CancelAt is when a cancel was asked (zero when
	// none).
	CreatedAt, ExpiresAt, EndedAt, CancelAt time.Time
	// InputFileID, OutputFileID and ErrorFileID are an OpenAI batch's
	// files (empty when there is none).
	InputFileID, OutputFileID, ErrorFileID string
	// Errors are an OpenAI batch's validation errors when it failed.
	Errors []llm.OpenAIBatchError
	// Metadata is an OpenAI batch's metadata (Anthropic batches have
	// none).
	Metadata map[string]string
}

// Err is the error of a batch that failed as a whole (an OpenAI batch
// refused by its validation or its enqueued-token limit), nil otherwise:
// ErrLimit for token_limit_exceeded, ErrInvalid for anything else.
func (b *Batch) Err() error {
	if b.Status != llm.OpenAIBatchFailed {
		return nil
	}
	kind := ErrInvalid
	for _, e := range b.Errors {
		if e.Code == "token_limit_exceeded" {
			kind = ErrLimit
		}
	}
	return &Error{Op: "batch " + b.ID + " failed", Errors: b.Errors, kind: kind}
}

// Create submits a batch (OpenAI: uploads its input file first, and
// deletes it again if the batch cannot be created). An OpenAI batch
// refused at once (it "failed") is returned with its Err.
func (c *Client) Create(ctx context.Context, p CreateParams) (*Batch, error) {
	if err := checkLines(p.Lines); err != nil {
		return nil, fmt.Errorf("creating the batch: %w", err)
	}
	if c.cfg.Protocol == llm.OpenAI {
		return c.createOpenAI(ctx, p)
	}
	return c.createAnthropic(ctx, p)
}

// Get reads a batch's state.
func (c *Client) Get(ctx context.Context, id string) (*Batch, error) {
	if c.cfg.Protocol == llm.OpenAI {
		return c.openAIBatch(ctx, request{op: "reading batch " + id, method: http.MethodGet, path: "/v1/batches/" + id})
	}
	return c.anthropicBatch(ctx, request{op: "reading batch " + id, method: http.MethodGet, path: "/v1/messages/batches/" + id})
}

// Cancel asks the provider to stop a batch: its unprocessed requests end
// canceled, the processed ones keep their results. A batch that has
// already ended is refused (ErrInvalid): read its results instead.
func (c *Client) Cancel(ctx context.Context, id string) (*Batch, error) {
	if c.cfg.Protocol == llm.OpenAI {
		return c.openAIBatch(ctx, request{op: "canceling batch " + id, method: http.MethodPost, path: "/v1/batches/" + id + "/cancel"})
	}
	return c.anthropicBatch(ctx, request{op: "canceling batch " + id, method: http.MethodPost, path: "/v1/messages/batches/" + id + "/cancel"})
}

// Results streams an ended batch's results to fn, one per request, in the
// provider's order; an error from fn stops the stream and is returned. An
// OpenAI batch's output file is read, then its error file.
func (c *Client) Results(ctx context.Context, b *Batch, fn func(Result) error) error {
	if !b.Ended {
		return fmt.Errorf("reading the results of batch %s: %w: it has not ended (status %s)", b.ID, ErrNotFound, b.Status)
	}
	if c.cfg.Protocol == llm.Anthropic {
		return c.stream(ctx, request{op: "reading the results of batch " + b.ID, method: http.MethodGet,
			path: "/v1/messages/batches/" + b.ID + "/results"}, fn)
	}
	for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
		if id == "" {
			continue
		}
		if err := c.stream(ctx, request{op: "reading results file " + id, method: http.MethodGet, path: "/v1/files/" + id + "/content"}, fn); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) stream(ctx context.Context, r request, fn func(Result) error) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := ParseResults(c.cfg.Protocol, resp.Body, fn); err != nil {
		return fmt.Errorf("%s: %w", r.op, err)
	}
	return nil
}

// Delete cleans an ended batch up at the provider: Anthropic deletes the
// batch; OpenAI (whose batches cannot be deleted) deletes its input,
// output and error files. A file or batch already gone is not an error.
func (c *Client) Delete(ctx context.Context, b *Batch) error {
	if c.cfg.Protocol == llm.Anthropic {
		err := c.call(ctx, request{op: "deleting batch " + b.ID, method: http.MethodDelete, path: "/v1/messages/batches/" + b.ID}, &struct{}{})
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	var errs []error
	for _, id := range []string{b.InputFileID, b.OutputFileID, b.ErrorFileID} {
		if id != "" {
			if err := c.DeleteFile(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// DeleteFile deletes an OpenAI file; one already gone is not an error.
func (c *Client) DeleteFile(ctx context.Context, id string) error {
	err := c.call(ctx, request{op: "deleting file " + id, method: http.MethodDelete, path: "/v1/files/" + id}, &struct{}{})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
