package jobs

import (
	"sync"
	"time"
)

// heldAnswers are the answers workers of this process hold in memory past
// their lease (the store was away and the spool could not take them), and
// the jobs recently completed with an answer after their lease was lost.
// It makes sure a job is not called again here while its answer is in
// hand: a claim of the job takes the held answer instead of calling
// (claimed), and a write of an answer after a lost lease excludes the
// claims of that job that could race with it (completeLost). Safe for
// concurrent use; the zero value is ready.
type heldAnswers struct {
	mu      sync.Mutex
	held    map[int64]heldAnswer
	written map[int64]time.Time // job → when its answer was written after a lost lease
}

// heldAnswer is an answer held under the lease token it was called with.
type heldAnswer struct {
	token int64
	v     verdict
}

// hold registers v, the answer of job id called under token.
func (h *heldAnswers) hold(id, token int64, v verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[int64]heldAnswer{}
	}
	h.held[id] = heldAnswer{token: token, v: v}
}

// unhold withdraws the answer held under token, unless a claim took it.
func (h *heldAnswers) unhold(id, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.held[id]; ok && a.token == token {
		delete(h.held, id)
	}
}

// claimed is called by the run of job id just claimed here, before its
// call: it hands over a held answer to write instead (held), or reports
// that the job's answer was written after its lease was lost while the
// claim was made (answered: nothing to do).
func (h *heldAnswers) claimed(id int64) (v verdict, held, answered bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.written[id]; ok {
		delete(h.written, id)
		return verdict{}, false, true
	}
	a, ok := h.held[id]
	delete(h.held, id)
	return a.v, ok, false
}

// completeLost runs write, a store write completing job id with an answer
// whose lease (token) was lost, with the job's claims here held off: a
// claim made before it returns finds the job answered (claimed). With
// fromHold, the answer is the one held under token, and taken reports that
// a claim took it first (write is not run: the claim writes it). Marks of
// written answers older than keep are dropped.
func (h *heldAnswers) completeLost(id, token int64, fromHold bool, now time.Time, keep time.Duration, write func() error) (taken bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fromHold {
		if a, ok := h.held[id]; !ok || a.token != token {
			return true, nil
		}
	}
	if err := write(); err != nil {
		return false, err
	}
	if fromHold {
		delete(h.held, id)
	}
	if h.written == nil {
		h.written = map[int64]time.Time{}
	}
	for j, at := range h.written {
		if now.Sub(at) > keep {
			delete(h.written, j)
		}
	}
	h.written[id] = now
	return false, nil
}
