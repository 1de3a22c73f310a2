package jobstore

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// File is a file uploaded to the gateway for a batch (OpenAI's Files API,
// purpose "batch"). It belongs to the client that uploaded it and is kept
// until deleted.
type File struct {
	ID       string
	Client   string
	Upstream string
	Purpose  string
	Filename string
	// Bytes is the content's length.
	Bytes     int64
	CreatedAt time.Time
	// Content is set by GetFile with GetFileParams.Content only.
	Content []byte
}

// CreateFileParams describes a file to store.
type CreateFileParams struct {
	// ID is the file id; empty lets the store make one ("file-" + hex).
	ID       string
	Client   string
	Upstream string
	// Purpose is required (e.g. "batch").
	Purpose  string
	Filename string
	Content  []byte
	Now      time.Time
}

func (p *CreateFileParams) validate() error {
	if p.ID == "" {
		p.ID = newFileID()
	}
	switch {
	case p.Purpose == "":
		return invalid("Purpose", "required")
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	if p.Content == nil {
		p.Content = []byte{}
	}
	return nil
}

func newFileID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "file-" + hex.EncodeToString(b[:])
}

// GetFileParams names a file to read.
type GetFileParams struct {
	ID string
	// Content reads the file's content too.
	Content bool
}

// ListFilesParams selects files for ListFiles, newest first.
type ListFilesParams struct {
	// Client, Upstream and Purpose keep only matching files; empty means
	// any.
	Client, Upstream, Purpose string
	// After is a file id: only files older than it (the next page). An id
	// that does not exist gives no file.
	After string
	// Limit bounds the files returned, in [1, ListLimitMax]; 0 means
	// ListLimitDefault.
	Limit int
}

func (p ListFilesParams) limit() int {
	if p.Limit <= 0 {
		return ListLimitDefault
	}
	return min(p.Limit, ListLimitMax)
}
