package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/provider/batches"
	"github.com/sluicehq/sluice/upstream"
)

// TagMetadataKey is the metadata key an OpenAI batch made by the router
// carries its group's id under (BatchAPI.Create's tag).
const TagMetadataKey = "sluice_group"

// findSkew is how much earlier than the create's start (on Sluice's
// clock) Find still looks, for the provider's clock running behind.
const findSkew = 5 * time.Minute

// findMaxBatches bounds the batches Find reads through, newest first.
const findMaxBatches = 10_000

// BatchAPIConfig builds an upstream's BatchAPI (NewBatchAPI).
type BatchAPIConfig struct {
	// Upstream is the routed upstream: its protocol, base URL, request
	// timeout and key. Batches are made with its first key (api_key, or
	// api_keys[0]): a provider batch belongs to the key that made it, so
	// the key must stay the same while batches run. Required.
	Upstream upstream.Config
	// Transport reaches the provider. Defaults to http.DefaultTransport.
	Transport http.RoundTripper
	// Clock reads the provider's retry hints. Defaults to the wall clock.
	Clock clock.Clock
}

// NewBatchAPI returns the BatchAPI of cfg.Upstream's provider: Anthropic's
// Message Batches or OpenAI's Files and Batch, through a
// batches.Client.
func NewBatchAPI(cfg BatchAPIConfig) (BatchAPI, error) {
	u := cfg.Upstream.WithDefaults()
	keys := u.Keys()
	if len(keys) == 0 {
		return nil, fmt.Errorf("upstream %q: the provider's Batch API needs a key (api_key or api_keys)", u.Name)
	}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c, err := batches.New(batches.Config{Protocol: u.Protocol, BaseURL: u.BaseURL, APIKey: keys[0].Key,
		HTTPClient: &http.Client{Transport: dispatch.UpstreamTransport(rt, u)}, Clock: cfg.Clock})
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", u.Name, err)
	}
	return &providerBatchAPI{c: c}, nil
}

// providerBatchAPI is BatchAPI on a batches.Client: it maps the client's
// batches and results to the router's, and its sentinels to BatchAPI's.
type providerBatchAPI struct{ c *batches.Client }

func (a *providerBatchAPI) Create(ctx context.Context, tag string, lines []BatchLine) (ProviderBatch, error) {
	if len(lines) == 0 {
		return ProviderBatch{}, errors.New("creating a provider batch: no lines")
	}
	p := batches.CreateParams{Endpoint: lines[0].Path, Lines: make([]batches.Line, len(lines))}
	for i, l := range lines {
		if l.Path != p.Endpoint {
			// The router groups by path; a mix is a bug, refused whole.
			return ProviderBatch{}, &BatchRefusalError{Status: http.StatusBadRequest, Err: fmt.Errorf(
				"creating a provider batch: lines to %s and %s: a batch carries one endpoint", p.Endpoint, l.Path)}
		}
		p.Lines[i] = batches.Line{CustomID: l.CustomID, Body: l.Body}
	}
	if a.c.Protocol() == llm.OpenAI {
		p.Metadata = map[string]string{TagMetadataKey: tag}
	}
	b, err := a.c.Create(ctx, p)
	if b != nil && err != nil {
		// An OpenAI batch made and failed at once (its validation, the
		// enqueued-token limit): nothing runs; take its file back.
		if derr := a.c.Delete(context.WithoutCancel(ctx), b); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	if err != nil {
		return ProviderBatch{}, a.mapErr(err)
	}
	return providerBatch(b), nil
}

// mapErr maps the client's sentinels to BatchAPI's: the provider's limits
// to ErrBatchQueueFull, a refusal of the batch's content to a
// *BatchRefusalError, a missing batch to ErrBatchNotFound; anything else
// (unavailable, rejected key, quota, transport) stays as it is, for the
// router to retry.
func (a *providerBatchAPI) mapErr(err error) error {
	var be *batches.Error
	switch {
	case errors.Is(err, batches.ErrLimit):
		return fmt.Errorf("%w: %w", ErrBatchQueueFull, err)
	case errors.Is(err, batches.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrBatchNotFound, err)
	case errors.Is(err, batches.ErrInvalid):
		status, msg := http.StatusBadRequest, err.Error()
		if errors.As(err, &be) && be.Outcome.Status != 0 {
			status = be.Outcome.Status
		}
		return &BatchRefusalError{Status: status, Body: provider.ErrorBody(a.c.Protocol(), status, "invalid_request_error", msg, ""), Err: err}
	}
	return err
}

// batchSize is how the router counts a group against batch.max_bytes for
// protocol p and path, as the provider receives the batch: what each
// job's line adds around its body (by job id), and what the batch adds
// around its lines (batches.LineBytes, batches.BatchBytes).
func batchSize(p llm.Protocol, path string) (lineBytes func(id int64) int64, batchBytes int64) {
	return func(id int64) int64 { return batches.LineBytes(p, path, lineID(id)) }, batches.BatchBytes(p)
}

func providerBatch(b *batches.Batch) ProviderBatch {
	return ProviderBatch{ID: b.ID, Ended: b.Ended, CreatedAt: b.CreatedAt}
}

func (a *providerBatchAPI) Get(ctx context.Context, id string) (ProviderBatch, error) {
	b, err := a.c.Get(ctx, id)
	if err != nil {
		return ProviderBatch{}, a.mapErr(err)
	}
	return providerBatch(b), nil
}

func (a *providerBatchAPI) Results(ctx context.Context, id string) ([]BatchLineResult, error) {
	b, err := a.c.Get(ctx, id)
	if err != nil {
		return nil, a.mapErr(err)
	}
	if ferr := b.Err(); ferr != nil {
		// An OpenAI batch that failed its validation or the enqueued-token
		// limit after it was accepted: none of its lines ran.
		_ = a.c.Delete(ctx, b) // best effort: its input file
		return nil, a.mapErr(ferr)
	}
	var out []BatchLineResult
	err = a.c.Results(ctx, b, func(r batches.Result) error {
		out = append(out, lineResult(a.c.Protocol(), r))
		return nil
	})
	if err != nil {
		return nil, a.mapErr(err)
	}
	return out, nil
}

// lineResult is a result line as the router writes it back.
func lineResult(p llm.Protocol, r batches.Result) BatchLineResult {
	out := BatchLineResult{CustomID: r.CustomID, Status: r.Status, Body: r.Body}
	switch r.Type {
	case batches.Succeeded:
		out.Outcome, out.Usage = LineSucceeded, r.Usage
	case batches.Errored:
		out.Outcome = LineErrored
		if len(out.Body) == 0 {
			// An OpenAI line that failed without a response: its error.
			out.Body = provider.ErrorBody(p, max(out.Status, http.StatusInternalServerError), r.ErrorType,
				r.ErrorCode+": "+r.ErrorMessage, r.RequestID)
		}
	case batches.Canceled:
		out.Outcome = LineCanceled
	default:
		out.Outcome = LineExpired
	}
	return out
}

func (a *providerBatchAPI) Cancel(ctx context.Context, id string) error {
	_, err := a.c.Cancel(ctx, id)
	if errors.Is(err, batches.ErrInvalid) {
		// Refused because it has ended already: its results are read
		// on the next poll.
		return nil
	}
	if err != nil {
		return a.mapErr(err)
	}
	return nil
}

// Find reads the key's batches newest first, down to q.Since (less
// findSkew). OpenAI: the batch whose metadata carries q.Tag. Anthropic
// batches carry no metadata: a batch of as many requests, once ended,
// is the one whose results are exactly q's custom_ids (a job's custom_id
// is its id, and a job is in one group at a time); one still running
// that may be it leaves the answer undecided (ErrBatchUndecided).
func (a *providerBatchAPI) Find(ctx context.Context, q BatchQuery) (ProviderBatch, bool, error) {
	cutoff := q.Since.Add(-findSkew)
	undecided := false
	after := ""
	for seen := 0; seen < findMaxBatches; {
		page, err := a.c.List(ctx, batches.ListParams{After: after})
		if err != nil {
			return ProviderBatch{}, false, fmt.Errorf("looking for batch %s: %w", q.Tag, a.mapErr(err))
		}
		for _, b := range page.Batches {
			seen++
			if b.CreatedAt.Before(cutoff) {
				return a.notFound(q, undecided)
			}
			if a.c.Protocol() == llm.OpenAI {
				if b.Metadata[TagMetadataKey] == q.Tag {
					return providerBatch(b), true, nil
				}
				continue
			}
			if b.Counts.Total != len(q.Lines) {
				continue
			}
			if !b.Ended {
				undecided = true
				continue
			}
			ok, err := a.holdsExactly(ctx, b, q.Lines)
			if err != nil {
				return ProviderBatch{}, false, fmt.Errorf("looking for batch %s: %w", q.Tag, a.mapErr(err))
			}
			if ok {
				return providerBatch(b), true, nil
			}
		}
		if !page.HasMore || len(page.Batches) == 0 {
			break
		}
		after = page.Batches[len(page.Batches)-1].ID
	}
	return a.notFound(q, undecided)
}

func (a *providerBatchAPI) notFound(q BatchQuery, undecided bool) (ProviderBatch, bool, error) {
	if undecided {
		return ProviderBatch{}, false, fmt.Errorf("looking for batch %s: %w: a batch of %d requests made since is still running",
			q.Tag, ErrBatchUndecided, len(q.Lines))
	}
	return ProviderBatch{}, false, nil
}

// errNotOurs stops reading a batch's results at its first foreign line.
var errNotOurs = errors.New("a line of another batch")

// holdsExactly reports whether ended batch b's results are lines' custom_ids.
func (a *providerBatchAPI) holdsExactly(ctx context.Context, b *batches.Batch, lines []BatchLine) (bool, error) {
	want := make(map[string]bool, len(lines))
	for _, l := range lines {
		want[l.CustomID] = true
	}
	n := 0
	err := a.c.Results(ctx, b, func(r batches.Result) error {
		if !want[r.CustomID] {
			return errNotOurs
		}
		delete(want, r.CustomID)
		n++
		return nil
	})
	switch {
	case errors.Is(err, errNotOurs):
		return false, nil
	case err != nil:
		return false, err
	}
	return n == len(lines) && len(want) == 0, nil
}
