package jobstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
)

// Stores keep times to the microsecond (PostgreSQL's precision), in UTC.
func storeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

func (p *InsertParams) validate() error {
	switch {
	case p.Upstream == "":
		return invalid("Upstream", "required")
	case p.Path == "":
		return invalid("Path", "required")
	case !p.Priority.Valid():
		return invalid("Priority", "%d is not 0..3", int(p.Priority))
	case p.MaxAttempts < 1:
		return invalid("MaxAttempts", "%d is below 1", p.MaxAttempts)
	case len(p.RunID) > MaxRunIDLen:
		return invalid("RunID", "longer than %d bytes", MaxRunIDLen)
	case p.Now.IsZero():
		return invalid("Now", "required")
	case p.Dead != nil && p.WebhookURL != "":
		return invalid("Dead", "a job inserted dead takes no WebhookURL")
	}
	return nil
}

// validateInsert checks p for Insert, which queues: only CreateBatch
// inserts a job dead.
func (p *InsertParams) validateInsert() error {
	if p.Dead != nil {
		return invalid("Dead", "only a batch's job (CreateBatch) is inserted dead")
	}
	return p.validate()
}

// deadError is the attempt error a job inserted dead is stored with.
func (p InsertParams) deadError() AttemptError {
	e := *p.Dead
	if e.At.IsZero() {
		e.At = p.Now
	}
	return e
}

// normalized returns p with times in store precision and AvailableAt set.
func (p InsertParams) normalized() InsertParams {
	p.Now = storeTime(p.Now)
	if p.AvailableAt.IsZero() {
		p.AvailableAt = p.Now
	}
	p.AvailableAt = storeTime(p.AvailableAt)
	if !p.Deadline.IsZero() {
		p.Deadline = storeTime(p.Deadline)
	}
	if p.Body == nil {
		p.Body = []byte{}
	}
	return p
}

func (p *ClaimParams) validate() error {
	switch {
	case p.Priority != nil && !p.Priority.Valid():
		return invalid("Priority", "%d is not 0..3", int(*p.Priority))
	case p.Limit < 1:
		return invalid("Limit", "%d is below 1", p.Limit)
	case p.LeaseFor <= 0:
		return invalid("LeaseFor", "%v is not positive", p.LeaseFor)
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	return nil
}

// openJobs counts p's jobs that are not dead from the start: what the
// batch waits for before it ends.
func (p *CreateBatchParams) openJobs() int {
	n := 0
	for _, j := range p.Jobs {
		if j.Dead == nil {
			n++
		}
	}
	return n
}

// validate checks p and fills its defaults: a new ID when none is given,
// and each job's Now from the batch's.
func (p *CreateBatchParams) validate() error {
	if p.ID == "" {
		p.ID = newBatchID()
	}
	if _, err := llm.ParseProtocol(string(p.Format)); err != nil {
		return invalid("Format", "%v", err)
	}
	if len(p.Jobs) == 0 && !p.AllowEmpty {
		return invalid("Jobs", "a batch needs at least one job")
	}
	if p.Now.IsZero() {
		return invalid("Now", "required")
	}
	seen := make(map[string]struct{}, len(p.Jobs))
	for i := range p.Jobs {
		j := &p.Jobs[i]
		if j.Now.IsZero() {
			j.Now = p.Now
		}
		if err := j.validate(); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		if j.CustomID == "" {
			return invalid(fmt.Sprintf("Jobs[%d].CustomID", i), "required")
		}
		if j.RunID != "" {
			return invalid(fmt.Sprintf("Jobs[%d].RunID", i), "a batch's jobs belong to their batch, not a run")
		}
		if _, dup := seen[j.CustomID]; dup {
			return invalid(fmt.Sprintf("Jobs[%d].CustomID", i), "%q is used twice", j.CustomID)
		}
		seen[j.CustomID] = struct{}{}
	}
	return nil
}

func (p *CancelRunParams) validate() error {
	switch {
	case p.RunID == "":
		return invalid("RunID", "required")
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	return nil
}

func (p *DeleteFinishedParams) validate() error {
	if !p.State.Finished() {
		return invalid("State", "%q is not a finished state", p.State)
	}
	return nil
}

// pageOf turns the up to limit+1 jobs a List query fetched into a page:
// the extra job only tells that there is a next page.
func pageOf(jobs []*Job, limit int) JobPage {
	page := JobPage{Jobs: jobs}
	if len(jobs) > limit {
		page.Jobs = jobs[:limit]
		page.Next = jobs[limit-1].ID
	}
	return page
}

func pageLimit(n int) int {
	switch {
	case n <= 0:
		return ListLimitDefault
	case n > ListLimitMax:
		return ListLimitMax
	}
	return n
}

func newBatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "batch_" + hex.EncodeToString(b[:])
}

// attemptErrorJSON is AttemptError as stored: the outcome kind by name so
// the history stays readable in SQL. Rows written before the kind was
// named "kind" hold it as "class": both are read.
type attemptErrorJSON struct {
	Attempt      int       `json:"attempt"`
	Status       int       `json:"status"`
	Kind         string    `json:"kind,omitempty"`
	Class        string    `json:"class,omitempty"`
	Message      string    `json:"message"`
	RetryAfterMS int64     `json:"retry_after_ms,omitempty"`
	Upstream     string    `json:"upstream,omitempty"`
	At           time.Time `json:"at"`
}

func encodeAttemptError(e AttemptError) []byte {
	b, _ := json.Marshal(attemptErrorJSON{Attempt: e.Attempt, Status: e.Status, Kind: e.Kind, Message: e.Message,
		RetryAfterMS: e.RetryAfter.Milliseconds(), Upstream: e.Upstream, At: e.At.UTC()})
	return b
}

// recordedError is e as the history keeps it: the attempt after the
// attempts already made, at now, unless e names its own.
func recordedError(e AttemptError, attempts int, now time.Time) AttemptError {
	e.Attempt = cmpOr(e.Attempt, attempts+1)
	if e.At.IsZero() {
		e.At = storeTime(now)
	}
	return e
}

func decodeAttemptErrors(b []byte) ([]AttemptError, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if string(b) == "[]" {
		return []AttemptError{}, nil // most jobs: no decoder for nothing
	}
	var raw []attemptErrorJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("decoding error history: %w", err)
	}
	out := make([]AttemptError, len(raw))
	for i, r := range raw {
		out[i] = AttemptError{Attempt: r.Attempt, Status: r.Status, Kind: cmp.Or(r.Kind, r.Class), Message: r.Message,
			RetryAfter: time.Duration(r.RetryAfterMS) * time.Millisecond, Upstream: r.Upstream, At: r.At}
	}
	return out, nil
}

func encodeHeader(h http.Header) []byte {
	if h == nil {
		h = http.Header{}
	}
	b, _ := json.Marshal(h)
	return b
}

func decodeHeader(b []byte) (http.Header, error) {
	h := http.Header{}
	if len(b) == 0 {
		return h, nil
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decoding result headers: %w", err)
	}
	return h, nil
}

// failOutcome decides what a failure does to a job with the given counters:
// the state it ends in, the attempts after it and its next AvailableAt.
func failOutcome(p FailParams, attempts, maxAttempts int, deadline time.Time) (State, int, time.Time) {
	retryAt := p.RetryAt
	if retryAt.IsZero() || retryAt.Before(p.Now) {
		retryAt = p.Now
	}
	retryAt = storeTime(retryAt)
	switch p.Kind {
	case FailReschedule:
	case FailRetry:
		attempts++
		if attempts >= maxAttempts {
			return StateDead, attempts, retryAt
		}
	case FailTerminal:
		return StateDead, attempts + 1, retryAt
	default:
		return StateDead, attempts + 1, retryAt
	}
	if !deadline.IsZero() && retryAt.After(deadline) {
		return StateDead, attempts, retryAt
	}
	return StateQueued, attempts, retryAt
}

// sortClaimed puts claimed jobs in claim order (RETURNING has none).
func sortClaimed(jobs []*Job) {
	slices.SortFunc(jobs, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.AvailableAt.Compare(b.AvailableAt), cmp.Compare(a.ID, b.ID))
	})
}

// stallMessage and deadlineMessage are the history entries the rescuer
// writes.
const (
	stallMessage    = "lease expired: no heartbeat reached the store (the worker died, or could not reach the store)"
	deadlineMessage = "deadline passed while queued"
)

func (p *RequeueParams) validate() error {
	if len(p.IDs) == 0 && p.Upstream == "" && p.BatchID == "" && !p.All {
		return invalid("IDs", "name jobs, a filter, or set All")
	}
	return nil
}

func providerProtocol(s string) llm.Protocol { return llm.Protocol(s) }

func priorityOf(n int16) llm.Priority { return llm.Priority(n) }

// clockSleep waits d on the options' clock.
func clockSleep(ctx context.Context, o Options, d time.Duration) error {
	return clock.Sleep(ctx, o.Clock, d)
}

func slicesSort(ids []int64) { slices.Sort(ids) }
