package jobsapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Chunk sizes of a batch body read without Content-Length: the first
// chunk, doubled up to the largest.
const (
	batchChunkMin = 64 << 10
	batchChunkMax = 4 << 20
)

// batchBody is a batch file held as it arrived, in chunks: no chunk is
// copied into a larger one as the body grows (io.ReadAll's growing buffer
// allocated several times the body and held about twice it until a later
// GC). Read hands the bytes on and lets go of each chunk once it is read,
// so the file and the requests parsed from it are not both held whole.
type batchBody struct {
	chunks [][]byte
}

// readBatchBody reads r's body, at most limit bytes, into a batchBody. A
// body whose Content-Length is over limit is refused before a byte is
// read; one without is refused as soon as a byte past limit arrives, with
// nothing past it read or held (http.MaxBytesReader has the server close
// the connection after the answer rather than read the rest). Either is
// errTooLarge; a failed read (the client gone, the gateway's request-bytes
// limit) is returned as it is.
func readBatchBody(w http.ResponseWriter, r *http.Request, limit int64) (*batchBody, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	b := &batchBody{}
	var total int64
	next := int64(batchChunkMin)
	if r.ContentLength >= 0 {
		next = r.ContentLength + 1 // +1: the EOF is read into it
	}
	for {
		// At most one byte past limit is ever held: the one that shows
		// the body is too large.
		chunk := make([]byte, min(next, limit+1-total))
		n, err := io.ReadFull(body, chunk)
		total += int64(n)
		if n > 0 {
			b.chunks = append(b.chunks, chunk[:n])
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if r.ContentLength >= 0 && total < r.ContentLength {
				return nil, fmt.Errorf("reading request body: %w", io.ErrUnexpectedEOF)
			}
			return b, nil
		case err != nil:
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return nil, errTooLarge
			}
			return nil, fmt.Errorf("reading request body: %w", err)
		case total > limit:
			return nil, errTooLarge
		}
		next = min(2*next, batchChunkMax)
	}
}

// Read implements io.Reader, dropping each chunk once it is read.
func (b *batchBody) Read(p []byte) (int, error) {
	for len(b.chunks) > 0 && len(b.chunks[0]) == 0 {
		b.chunks[0] = nil
		b.chunks = b.chunks[1:]
	}
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[0])
	b.chunks[0] = b.chunks[0][n:]
	return n, nil
}
