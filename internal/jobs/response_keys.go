package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// ResponseKeysLogEvery spaces the warnings of a response store that
// fails: one per interval, not one per response.
const ResponseKeysLogEvery = time.Minute

// ErrNoResponseKeys is the answer while the job store is not connected
// (a PostgreSQL store still connecting, or the queue stopped).
var ErrNoResponseKeys = errors.New("the job store is not connected")

// ResponseKeys is every upstream engine's dispatch.ResponseStore: the job
// store the gateway runs its queue on (docs/http-api.md, "Stored
// responses"), Set once the queue runs and unset before the store
// closes. Until then, and whenever the store fails, the engines keep to
// their memory. Make one with NewResponseKeys. Safe for concurrent use.
type ResponseKeys struct {
	st     atomic.Pointer[jobstore.Store]
	log    *slog.Logger
	clock  clock.Clock
	logged atomic.Int64 // unix nanoseconds of the last warning
}

var _ dispatch.ResponseStore = (*ResponseKeys)(nil)

// NewResponseKeys returns ResponseKeys with no store yet, warning on log.
func NewResponseKeys(log *slog.Logger, clk clock.Clock) *ResponseKeys {
	return &ResponseKeys{log: log, clock: clk}
}

// Set makes st (nil: none) the store the records go to.
func (r *ResponseKeys) Set(st jobstore.Store) {
	if r == nil {
		return
	}
	if st == nil {
		r.st.Store(nil)
		return
	}
	r.st.Store(&st)
}

func (r *ResponseKeys) store() (jobstore.Store, error) {
	p := r.st.Load()
	if p == nil {
		return nil, ErrNoResponseKeys
	}
	return *p, nil
}

func (r *ResponseKeys) PutResponseKey(ctx context.Context, k dispatch.StoredResponseKey) error {
	st, err := r.store()
	if err == nil {
		err = st.PutResponseKey(ctx, jobstore.PutResponseKeyParams{ResponseKey: jobstore.ResponseKey(k)})
	}
	if err != nil {
		r.warn("recording which key created a response failed: only this gateway remembers it, until it restarts",
			"upstream", k.Upstream, "response_id", k.ID, "err", err)
	}
	return err
}

func (r *ResponseKeys) GetResponseKey(ctx context.Context, upstream, id string, now time.Time) (dispatch.StoredResponseKey, bool, error) {
	st, err := r.store()
	if err != nil {
		return dispatch.StoredResponseKey{}, false, err
	}
	k, err := st.GetResponseKey(ctx, jobstore.GetResponseKeyParams{Upstream: upstream, ID: id, Now: now})
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		return dispatch.StoredResponseKey{}, false, nil
	case err != nil:
		r.warn("reading which key created a response failed: sent with the pool's first key", "upstream", upstream, "response_id", id, "err", err)
		return dispatch.StoredResponseKey{}, false, err
	}
	return dispatch.StoredResponseKey(k), true, nil
}

// warn logs msg unless a warning went out less than
// ResponseKeysLogEvery ago.
func (r *ResponseKeys) warn(msg string, args ...any) {
	now := r.clock.Now().UnixNano()
	last := r.logged.Load()
	if last != 0 && now-last < int64(ResponseKeysLogEvery) || !r.logged.CompareAndSwap(last, now) {
		return
	}
	r.log.Warn(msg, args...)
}
