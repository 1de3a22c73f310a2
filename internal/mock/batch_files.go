package mock

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OpenAI's Files API, as far as batches need it: POST /v1/files
// (multipart: purpose and file), GET /v1/files (list), GET /v1/files/{id},
// GET /v1/files/{id}/content, DELETE /v1/files/{id}. Files belong to their
// key. A batch's output and error files are made when it ends.

const filesPath = "/v1/files"

// filePurposes are the purposes OpenAI accepts on upload.
var filePurposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

// mockFile is one stored file.
type mockFile struct {
	id       string
	key      string
	purpose  string
	filename string
	created  time.Time
	content  []byte
}

type fileObject struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int     `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	ExpiresAt     *int64  `json:"expires_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	StatusDetails *string `json:"status_details"`
}

func (f *mockFile) object() fileObject {
	return fileObject{ID: f.id, Object: "file", Bytes: len(f.content), CreatedAt: f.created.Unix(), Filename: f.filename,
		Purpose: f.purpose, Status: "processed"}
}

// fileID is "file-" and 22 base62 characters.
func fileID() string { return "file-" + newID("")[2:] }

func (s *Server) serveFiles(w http.ResponseWriter, r *http.Request, rest string) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	switch {
	case id == "" && r.Method == http.MethodPost:
		s.uploadFile(x)
	case id == "" && r.Method == http.MethodGet:
		s.listFiles(x)
	case id != "" && action == "" && r.Method == http.MethodGet:
		s.withFile(x, id, func(f *mockFile) { x.replyJSON(f.object()) })
	case id != "" && action == "" && r.Method == http.MethodDelete:
		s.withFile(x, id, func(f *mockFile) {
			delete(s.batches.files, f.id)
			x.replyJSON(map[string]any{"id": f.id, "object": "file", "deleted": true})
		})
	case id != "" && action == "content" && r.Method == http.MethodGet:
		s.withFile(x, id, func(f *mockFile) {
			x.commonHeaders("application/octet-stream")
			x.w.Header().Set("Content-Length", strconv.Itoa(len(f.content)))
			x.w.WriteHeader(http.StatusOK)
			_, _ = x.w.Write(f.content)
			s.stats.status(x.key, http.StatusOK)
		})
	case id != "" && (action == "" || action == "content"):
		x.fail(&apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: fmt.Sprintf("Method %s not allowed for %s", r.Method, r.URL.Path)}, nil)
	default:
		x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)}, nil)
	}
}

// withFile runs fn on key's file id under the store's lock, or answers 404.
func (s *Server) withFile(x *exchange, id string, fn func(*mockFile)) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	s.settleFiles(x.key, x.now)
	f := s.batches.files[id]
	if f == nil || f.key != x.key {
		x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "id",
			message: fmt.Sprintf("No such File object: %s", id)}, nil)
		return
	}
	fn(f)
}

// uploadFile stores a multipart upload (fields purpose and file).
func (s *Server) uploadFile(x *exchange) {
	limit := s.cfg.Batch.maxBytes(protoOpenAI)
	if mt, _, _ := mime.ParseMediaType(x.r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		x.fail(openAIInvalid("", "", "Invalid request: expected multipart/form-data with the fields 'purpose' and 'file'."), nil)
		return
	}
	x.r.Body = http.MaxBytesReader(x.w, x.r.Body, limit+1<<20) // the file and the form around it
	mr, err := x.r.MultipartReader()
	if err != nil {
		x.fail(openAIInvalid("", "", "Invalid multipart body: %v", err), nil)
		return
	}
	var purpose, filename string
	var content []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			var data []byte
			data, err = io.ReadAll(io.LimitReader(part, limit+1))
			switch part.FormName() {
			case "purpose":
				purpose = string(data)
			case "file":
				filename, content = part.FileName(), data
			}
		}
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				x.fail(&apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
					message: "Request exceeds the maximum allowed number of bytes."}, nil)
				return
			}
			x.fail(openAIInvalid("", "", "Invalid multipart body: %v", err), nil)
			return
		}
	}
	switch {
	case purpose == "":
		x.fail(openAIInvalid("purpose", "missing_required_parameter", "Missing required parameter: 'purpose'."), nil)
		return
	case !slices.Contains(filePurposes, purpose):
		x.fail(openAIInvalid("purpose", "invalid_value", "Invalid value for 'purpose': supported values are '%s'.",
			strings.Join(filePurposes, "', '")), nil)
		return
	case content == nil:
		x.fail(openAIInvalid("file", "missing_required_parameter", "Missing required parameter: 'file'."), nil)
		return
	case int64(len(content)) > limit:
		// OpenAI's answer, param and code null.
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: "File is too large."}, nil)
		return
	}
	f := &mockFile{id: fileID(), key: x.key, purpose: purpose, filename: filename, created: x.now, content: content}
	s.batches.mu.Lock()
	s.batches.files[f.id] = f
	s.batches.mu.Unlock()
	x.replyJSON(f.object())
}

// listFiles pages key's files, newest first (purpose, after, limit 1 to
// 10,000, default 10,000).
func (s *Server) listFiles(x *exchange) {
	q := x.r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 10_000, 10_000)
	if !ok {
		x.fail(openAIInvalid("limit", "invalid_value", "Invalid 'limit': expected an integer between 1 and 10000."), nil)
		return
	}
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	s.settleFiles(x.key, x.now)
	var all []*mockFile
	for _, f := range s.batches.files {
		if f.key == x.key && (q.Get("purpose") == "" || f.purpose == q.Get("purpose")) {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *mockFile) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	page, more := pageOf(all, func(f *mockFile) string { return f.id }, "", q.Get("after"), limit)
	out := openAIPage[fileObject]{Object: "list", Data: []fileObject{}, HasMore: more}
	for _, f := range page {
		out.Data = append(out.Data, f.object())
	}
	out.ends(func(f fileObject) string { return f.ID })
	x.replyJSON(out)
}

// openAIPage is OpenAI's cursor page.
type openAIPage[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

func (p *openAIPage[T]) ends(id func(T) string) {
	if n := len(p.Data); n > 0 {
		first, last := id(p.Data[0]), id(p.Data[n-1])
		p.FirstID, p.LastID = &first, &last
	}
}

// queryLimit reads a list's limit parameter: def when absent, ok false
// unless it is an integer in [1, most].
func queryLimit(v string, def, most int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 1 && n <= most
}
