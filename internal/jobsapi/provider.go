package jobsapi

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// The providers' own batch APIs, answered on each upstream's prefix so that
// the official SDKs work with the gateway's upstream URL as their base:
// Anthropic's Message Batches (message_batches.go) and OpenAI's Batch and
// Files APIs (openai_batches.go, openai_files.go). They are views over
// Sluice batches: a create queues one job per request in the store, owned
// by the caller, scheduled like any job at the batch's class, and the
// provider's objects are rendered from the batch's counts and jobs.

// BatchWindow is how long a provider batch's requests may wait before they
// expire (both providers' 24 hours): each job's deadline.
const BatchWindow = 24 * time.Hour

// providerRoute reports whether method and path (the path after the
// upstream's prefix) are a provider batch route Sluice answers for proto.
func (a *API) providerMux(proto llm.Protocol) *http.ServeMux {
	if proto == llm.OpenAI {
		return a.openaiMux
	}
	return a.anthropicMux
}

// ServesProvider reports whether ServeProvider answers method and path
// (the path after the upstream's prefix) on upstream: a route of the
// provider's batch or files API.
func (a *API) ServesProvider(upstream, method, path string) bool {
	proto, ok := a.cfg.Protocols[upstream]
	if !ok {
		return false
	}
	r, err := http.NewRequest(method, path, http.NoBody)
	if err != nil {
		return false
	}
	_, pattern := a.providerMux(proto).Handler(r)
	return pattern != ""
}

// upstreamKey carries the upstream of a provider route to its handler.
type upstreamKey struct{}

// ServeProvider answers r, a provider batch or files route of upstream
// (ServesProvider), with path the path after the upstream's prefix.
// Errors are in the provider's own shape.
func (a *API) ServeProvider(w http.ResponseWriter, r *http.Request, upstream, path string) {
	proto := a.cfg.Protocols[upstream]
	r2 := r.Clone(context.WithValue(r.Context(), upstreamKey{}, upstream))
	r2.URL.Path, r2.URL.RawPath = path, ""
	a.providerMux(proto).ServeHTTP(w, r2)
}

// providerReq is what every provider route reads first.
type providerReq struct {
	upstream string
	proto    llm.Protocol
	client   string
	reqID    string
}

func (a *API) providerReq(r *http.Request) providerReq {
	up, _ := r.Context().Value(upstreamKey{}).(string)
	return providerReq{upstream: up, proto: a.cfg.Protocols[up], client: a.cfg.ClientOf(r), reqID: frontdoor.NewRequestID()}
}

// fail answers a provider route's error in the provider's shape.
func (p providerReq) fail(w http.ResponseWriter, status int, format string, args ...any) {
	frontdoor.WriteProblem(w, p.proto, p.reqID, frontdoor.Problem{Status: status, Message: fmt.Sprintf(format, args...)})
}

// bodyFail answers a failed read of a provider route's body (other than
// one over its cap, which each route answers as its provider does): the
// gateway's body readers refuse with their own Problem (a 503 when its
// request-bytes budget has no room), anything else is a 400.
func (p providerReq) bodyFail(w http.ResponseWriter, err error) {
	if pe, ok := errors.AsType[interface {
		error
		Problem() frontdoor.Problem
	}](err); ok {
		frontdoor.WriteProblem(w, p.proto, p.reqID, pe.Problem())
		return
	}
	p.fail(w, http.StatusBadRequest, "%v", err)
}

// storeFail answers a store failure: an outage is a 503 with retry-after.
func (a *API) storeFail(w http.ResponseWriter, p providerReq, what string, err error) {
	if errors.Is(err, jobstore.ErrUnavailable) {
		a.cfg.Logger.Warn("job store unavailable", "doing", what, "err", err)
		frontdoor.WriteProblem(w, p.proto, p.reqID, frontdoor.Problem{Status: http.StatusServiceUnavailable,
			Message: what + ": the job store is unavailable; retry later", RetryAfter: StoreRetryAfter, ShouldRetry: true})
		return
	}
	a.cfg.Logger.Error("job store failed", "doing", what, "err", err)
	p.fail(w, http.StatusInternalServerError, "%s: the job store failed", what)
}

// ownBatch loads batch id for p's caller: a batch of another client or of
// another upstream answers 404 like one that does not exist.
func (a *API) ownBatch(w http.ResponseWriter, r *http.Request, p providerReq, id string) (*jobstore.Batch, bool) {
	b, err := a.store.GetBatch(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound) || (err == nil && (b.Client != p.client || b.Upstream != p.upstream)):
		p.fail(w, http.StatusNotFound, "no batch %q", id)
		return nil, false
	case err != nil:
		a.storeFail(w, p, "loading the batch", err)
		return nil, false
	}
	return b, true
}

// providerBatchID is a new batch's id: prefix and random hex, or, when the
// caller sent an Idempotency-Key, hex derived from the client, upstream and
// key, so that a retried create finds the batch the first one made.
func providerBatchID(r *http.Request, p providerReq, prefix string) string {
	if key := r.Header.Get(IdempotencyKeyHeader); key != "" {
		sum := sha256.Sum256([]byte(p.client + "\x00" + p.upstream + "\x00" + key))
		return prefix + hex.EncodeToString(sum[:12])
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// providerClass is the class of a provider batch's jobs: the X-Priority
// header's, else the upstream's batch class (Config.BatchPriority), else
// PriorityDefault; capped by Config.PriorityOf.
func (a *API) providerClass(r *http.Request, p providerReq) (llm.Priority, error) {
	prio, ok := a.cfg.BatchPriority[p.upstream]
	if !ok {
		prio = PriorityDefault
	}
	if v := r.Header.Get(frontdoor.HeaderPriority); v != "" {
		hp, err := llm.ParsePriority(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", frontdoor.HeaderPriority, err)
		}
		prio = hp
	}
	return a.cfg.PriorityOf(r, prio), nil
}

// createProviderBatch stores a provider batch of lines (already checked)
// with id and attrs, and the completion webhook the create names
// (batchWebhook: the header, or an OpenAI batch's metadata in attrs). A
// create retried with the same Idempotency-Key (so the same id) answers
// the batch the first one made (existing); false ok means it answered an
// error.
func (a *API) createProviderBatch(w http.ResponseWriter, r *http.Request, p providerReq, id string, attrs []byte,
	lines []BatchLine) (b *jobstore.Batch, existing, ok bool) {
	prio, err := a.providerClass(r, p)
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return nil, false, false
	}
	var meta openAIBatchAttrs
	if len(attrs) > 0 {
		_ = json.Unmarshal(attrs, &meta) // written by this package: an OpenAI batch's, or none
	}
	hook, err := a.batchWebhook(r, meta.Metadata[WebhookMetadataKey])
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return nil, false, false
	}
	now := a.cfg.Clock.Now()
	params := jobstore.CreateBatchParams{ID: id, Format: p.proto, Client: p.client, Upstream: p.upstream, Attrs: attrs,
		KeepUntil: now.Add(BatchWindow + a.cfg.BatchRetention), AllowEmpty: len(lines) == 0, WebhookURL: hook, Now: now}
	queued := 0
	for _, l := range lines {
		j := jobstore.InsertParams{Upstream: p.upstream, Priority: prio, Client: p.client,
			Path: cmp.Or(l.Path, pathFor(p.proto)), Body: l.Body, Deadline: now.Add(BatchWindow), MaxAttempts: a.cfg.MaxAttempts,
			CustomID: l.CustomID, Now: now}
		if e := l.refused; e != nil {
			// Refused as the provider refuses it: dead from the start with
			// its error, its errored result; never sent, never charged.
			j.Dead = &jobstore.AttemptError{Status: e.Status, Kind: llm.ClientError.String(), Message: e.Message, At: now}
			j.DeadResult = &jobstore.Result{Status: e.Status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: provider.ErrorBody(p.proto, e.Status, e.Type, e.Message, frontdoor.NewRequestID())}
		} else {
			queued++
		}
		params.Jobs = append(params.Jobs, j)
	}
	b, err = a.store.CreateBatch(r.Context(), params)
	if errors.Is(err, jobstore.ErrConflict) {
		// The id is taken: by this caller's earlier create with the same
		// key (answer it), or it never will be by anyone else's.
		if prev, gerr := a.store.GetBatch(r.Context(), id); gerr == nil && prev.Client == p.client && prev.Upstream == p.upstream {
			return prev, true, true
		}
		p.fail(w, http.StatusConflict, "the Idempotency-Key is already used by another batch")
		return nil, false, false
	}
	if err != nil {
		a.storeFail(w, p, "queueing the batch", err)
		return nil, false, false
	}
	if queued > 0 {
		a.cfg.Observer.Submitted(p.upstream, queued)
	}
	return b, false, true
}

// expiredIn counts the jobs of an ended batch that died of its deadline
// (the provider's "expired"), reading its jobs only when some died.
func (a *API) expiredIn(r *http.Request, b *jobstore.Batch) (int, error) {
	if !b.Ended() || b.Counts.Dead == 0 {
		return 0, nil
	}
	n := 0
	err := a.eachBatchJob(r, b.ID, func(j *jobstore.Job) error {
		if expired(j) {
			n++
		}
		return nil
	})
	return n, err
}

// baseURL is the gateway's URL as r's caller reached it, with the
// upstream's prefix: the root of the absolute URLs the providers answer.
func baseURL(r *http.Request, upstream string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/" + upstream
}
