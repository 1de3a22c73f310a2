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
// Every door that takes a batch file reads it so: POST /v1/batches, the
// Message Batches create and the Files upload.
type batchBody struct {
	chunks [][]byte
	n      int64 // bytes held
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
	b, err := readChunks(http.MaxBytesReader(w, r.Body, limit), limit, r.ContentLength+1) // +1: the EOF is read into it
	if err != nil {
		return nil, err
	}
	if r.ContentLength >= 0 && b.n < r.ContentLength {
		return nil, fmt.Errorf("reading request body: %w", io.ErrUnexpectedEOF)
	}
	return b, nil
}

// readChunks reads src to its end into a batchBody, at most limit bytes:
// errTooLarge as soon as a byte past limit arrives, with at most that one
// byte past it read or held. first is the size of the first chunk when
// the length is known (the body's Content-Length + 1), else below 1: the
// chunks then start at batchChunkMin and double up to batchChunkMax. An
// *http.MaxBytesError of src is errTooLarge too; any other read error is
// returned wrapped.
func readChunks(src io.Reader, limit, first int64) (*batchBody, error) {
	b := &batchBody{}
	next := int64(batchChunkMin)
	if first > 0 {
		next = first
	}
	for {
		chunk := make([]byte, min(next, limit+1-b.n))
		n, err := io.ReadFull(src, chunk)
		b.n += int64(n)
		if n > 0 {
			b.chunks = append(b.chunks, chunk[:n])
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return b, nil
		case err != nil:
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return nil, errTooLarge
			}
			return nil, fmt.Errorf("reading request body: %w", err)
		case b.n > limit:
			return nil, errTooLarge
		}
		next = min(2*next, batchChunkMax)
	}
}

// Len is how many bytes are still held.
func (b *batchBody) Len() int64 { return b.n }

// Bytes returns the whole body in one slice, and empties b. A body read
// in one chunk (its length was known) is that chunk, not copied; a longer
// one is copied once into a slice of its exact size, each chunk let go of
// as it is copied.
func (b *batchBody) Bytes() []byte {
	if len(b.chunks) == 1 {
		out := b.chunks[0]
		b.chunks, b.n = nil, 0
		return out
	}
	out := make([]byte, 0, b.n)
	for i, c := range b.chunks {
		out = append(out, c...)
		b.chunks[i] = nil
	}
	b.chunks, b.n = nil, 0
	return out
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
	b.n -= int64(n)
	return n, nil
}
