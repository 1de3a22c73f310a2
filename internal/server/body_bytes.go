package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/membudget"
)

// The request-bytes limit (max_request_bytes_in_flight) bounds the memory
// held by request bodies: a
// request reserves its body's size before the body is read and gives it
// back when the request is finished (its answer relayed, or its job
// stored). When the limit is reached a large request waits up to
// Config.RequestBytesWait for room and is then refused with a 503 and
// retry-after; requests below SmallRequestBytes are never refused, so the
// gateway keeps serving them while large bodies queue.

// SmallRequestBytes is the size up to which a request is never refused by
// the limit (its bytes are still counted).
const SmallRequestBytes = 64 << 10

// bodyBytesRetryAfter is the retry-after hint of a request refused for the
// request-bytes limit.
const bodyBytesRetryAfter = time.Second

// chunkedStep is how much a body without Content-Length reserves at a time
// as it is read.
const chunkedStep = 256 << 10

// errBodyBytesFull is returned when a reservation found no room in time.
var errBodyBytesFull = membudget.ErrFull

// bodyBytesError is errBodyBytesFull as seen by the jobs API's body reader: it
// carries the Problem to answer (see jobs.bodyError).
type bodyBytesError struct{ limit int64 }

func (e bodyBytesError) Error() string { return errBodyBytesFull.Error() }
func (e bodyBytesError) Unwrap() error { return errBodyBytesFull }

// Problem is the 503 answered for a refused request.
func (e bodyBytesError) Problem() frontdoor.Problem { return bodyBytesProblem(e.limit) }

func bodyBytesProblem(limit int64) frontdoor.Problem {
	return frontdoor.Problem{
		Status:     http.StatusServiceUnavailable,
		Message:    fmt.Sprintf("the gateway is holding its limit of %d bytes of request bodies in flight (max_request_bytes_in_flight); retry shortly", limit),
		RetryAfter: bodyBytesRetryAfter,
		// Nothing was sent upstream: the SDK's own retry is what we want.
		ShouldRetry: true,
	}
}

// reservation is one request's share of the limit. Release it once, when
// the request is finished.
type reservation struct {
	b    *membudget.Bytes
	ctx  context.Context
	held int64
}

// reserve takes a request's bytes before its body is read: its
// Content-Length when known (a request below SmallRequestBytes is never
// refused), else nothing yet (a chunked body reserves as it is read, see
// body). It fails with errBodyBytesFull when there was no room in time.
func reserveBody(b *membudget.Bytes, r *http.Request) (*reservation, error) {
	res := &reservation{b: b, ctx: r.Context()}
	if r.ContentLength > 0 {
		if err := res.grow(r.ContentLength); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// grow adds n bytes to the reservation: free up to SmallRequestBytes in
// all, checked against the limit beyond.
func (res *reservation) grow(n int64) error {
	if err := res.b.Take(res.ctx, n, res.held+n <= SmallRequestBytes); err != nil {
		return err
	}
	res.held += n
	return nil
}

// release gives the reservation's bytes back.
func (res *reservation) release() {
	if res == nil {
		return
	}
	res.b.Release(res.held)
	res.held = 0
}

// body wraps r.Body so that a body read past its reservation (no
// Content-Length) reserves more as it goes; a read that finds no room
// fails with a bodyBytesError.
func (res *reservation) body(r *http.Request) io.ReadCloser {
	if r.ContentLength >= 0 {
		return r.Body
	}
	return &bodyBytesReader{ReadCloser: r.Body, res: res}
}

type bodyBytesReader struct {
	io.ReadCloser
	res  *reservation
	read int64
}

func (br *bodyBytesReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return br.ReadCloser.Read(p)
	}
	if br.read >= br.res.held {
		// The first SmallRequestBytes come free, so that a small chunked
		// body is never refused either.
		step := int64(chunkedStep)
		if br.res.held < SmallRequestBytes {
			step = SmallRequestBytes - br.res.held
		}
		if err := br.res.grow(step); err != nil {
			if errors.Is(err, errBodyBytesFull) {
				return 0, bodyBytesError{limit: br.res.b.Limit()}
			}
			return 0, err
		}
	}
	if room := br.res.held - br.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := br.ReadCloser.Read(p)
	br.read += int64(n)
	return n, err
}

// readRequestBody reads r's body once, at most limit bytes: into a buffer
// of exactly Content-Length bytes when the length is known (no growth
// copies), else through io.ReadAll. A body over limit is a
// *http.MaxBytesError.
func readRequestBody(w http.ResponseWriter, r *http.Request, body io.Reader, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength >= 0 {
		buf := make([]byte, r.ContentLength)
		// The server's body reader stops at Content-Length; a shorter
		// body is io.ErrUnexpectedEOF.
		if _, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, io.NopCloser(body), limit))
}
