package jobsapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// OpenAI's Files API for batches: uploads (purpose "batch") are stored;
// a batch's output and error files are views of its jobs, named after the
// batch, rendered when read.

const (
	outputFileSuffix = "-output"
	errorFileSuffix  = "-errors"
	batchFilePrefix  = "file-"
)

func outputFileID(batchID string) string { return batchFilePrefix + batchID + outputFileSuffix }
func errorFileID(batchID string) string  { return batchFilePrefix + batchID + errorFileSuffix }

// batchFile names the batch and the kind of one of its result files, or
// reports false for any other file id.
func batchFile(id string) (batchID string, output, ok bool) {
	rest, found := strings.CutPrefix(id, batchFilePrefix+OpenAIBatchIDPrefix)
	if !found {
		return "", false, false
	}
	if b, found := strings.CutSuffix(rest, outputFileSuffix); found {
		return OpenAIBatchIDPrefix + b, true, true
	}
	if b, found := strings.CutSuffix(rest, errorFileSuffix); found {
		return OpenAIBatchIDPrefix + b, false, true
	}
	return "", false, false
}

// OpenAIFile is OpenAI's file object.
type OpenAIFile = llm.OpenAIFile

func openAIFile(f *jobstore.File) OpenAIFile {
	return OpenAIFile{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Filename,
		Purpose: f.Purpose, Status: "processed"}
}

// ownFile loads file id for p's caller (with its content when content),
// a batch's result file included; another client's, or another
// upstream's, answers 404.
func (a *API) ownFile(w http.ResponseWriter, r *http.Request, p providerReq, id string, content bool) (*jobstore.File, bool) {
	if batchID, output, ok := batchFile(id); ok {
		return a.resultFile(w, r, p, id, batchID, output, content)
	}
	f, err := a.store.GetFile(r.Context(), jobstore.GetFileParams{ID: id, Content: content})
	switch {
	case errors.Is(err, jobstore.ErrNotFound) || (err == nil && (f.Client != p.client || f.Upstream != p.upstream)):
		p.fail(w, http.StatusNotFound, "no file %q", id)
		return nil, false
	case err != nil:
		a.storeFail(w, p, "loading the file", err)
		return nil, false
	}
	return f, true
}

// resultFile renders file id, the output (or error) file of batch
// batchID: it exists once the batch names it (completed, cancelled or
// expired; not while it finalizes).
func (a *API) resultFile(w http.ResponseWriter, r *http.Request, p providerReq, id, batchID string, output, content bool) (*jobstore.File, bool) {
	b, err := a.store.GetBatch(r.Context(), batchID)
	if err != nil && !errors.Is(err, jobstore.ErrNotFound) {
		a.storeFail(w, p, "loading the batch", err)
		return nil, false
	}
	if err != nil || b.Client != p.client || b.Upstream != p.upstream || !b.Ended() {
		p.fail(w, http.StatusNotFound, "no file %q", id)
		return nil, false
	}
	v, err := a.renderOpenAIBatch(r, b)
	if err != nil {
		a.storeFail(w, p, "loading the batch", err)
		return nil, false
	}
	named := v.ErrorFileID
	if output {
		named = v.OutputFileID
	}
	if named == nil || *named != id {
		p.fail(w, http.StatusNotFound, "no file %q", id)
		return nil, false
	}
	var buf bytes.Buffer
	a.writeResults(&bufferWriter{&buf}, r, b, func(j *jobstore.Job) bool { return (j.State == jobstore.StateSucceeded) == output })
	kind := "errors"
	if output {
		kind = "output"
	}
	f := &jobstore.File{ID: id, Client: b.Client, Upstream: b.Upstream, Purpose: "batch_output",
		Filename: b.ID + "_" + kind + ".jsonl", Bytes: int64(buf.Len()), CreatedAt: b.EndedAt}
	if content {
		f.Content = buf.Bytes()
	}
	return f, true
}

// bufferWriter is an http.ResponseWriter over a buffer, for writeResults.
type bufferWriter struct{ *bytes.Buffer }

func (bufferWriter) Header() http.Header { return http.Header{} }
func (bufferWriter) WriteHeader(int)     {}

// uploadFormBytes is how much an upload may carry besides its file: the
// multipart framing and the purpose field.
const uploadFormBytes = 1 << 20

// fileTooLarge is OpenAI's answer to a batch input file over its limit.
const fileTooLarge = "File is too large."

// serveFileCreate stores a multipart upload: "purpose" (batch) and "file",
// at most MaxOpenAIBatchBytes (OpenAI's limit of a batch input file). The
// file is read as it arrives (readChunks), so an upload over the limit is
// refused as soon as its file crosses it, holding no more than the limit.
func (a *API) serveFileCreate(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	limit := a.cfg.MaxOpenAIBatchBytes
	if r.ContentLength > limit+uploadFormBytes {
		p.fail(w, http.StatusBadRequest, fileTooLarge)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		p.fail(w, http.StatusBadRequest, "upload the file as multipart/form-data with the fields purpose and file")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+uploadFormBytes)
	reader, err := r.MultipartReader()
	if err != nil {
		p.fail(w, http.StatusBadRequest, "reading the upload: %v", err)
		return
	}
	purpose, filename, content, err := readUpload(reader, limit, r.ContentLength)
	switch {
	case errors.Is(err, errTooLarge):
		p.fail(w, http.StatusBadRequest, fileTooLarge)
		return
	case err != nil:
		p.bodyFail(w, err)
		return
	case content == nil:
		p.fail(w, http.StatusBadRequest, "file is required")
		return
	case purpose != "batch":
		p.fail(w, http.StatusBadRequest, "purpose %q is not stored by this gateway: only \"batch\" files are (for /v1/batches)", purpose)
		return
	}
	f, err := a.store.CreateFile(r.Context(), jobstore.CreateFileParams{Client: p.client, Upstream: p.upstream, Purpose: purpose,
		Filename: filename, Content: content, Now: a.cfg.Clock.Now()})
	if err != nil {
		a.storeFail(w, p, "storing the file", err)
		return
	}
	writeJSON(w, http.StatusOK, openAIFile(f))
}

// uploadFieldBytes bounds an upload's fields other than its file.
const uploadFieldBytes = 4 << 10

// readUpload reads a multipart upload's purpose and file (at most limit
// bytes: errTooLarge past it; size, the request's Content-Length, sizes
// the file's first chunk). Other parts are read and dropped.
func readUpload(reader *multipart.Reader, limit, size int64) (purpose, filename string, content []byte, err error) {
	for {
		part, err := reader.NextPart()
		if errors.Is(err, io.EOF) {
			return purpose, filename, content, nil
		}
		if err != nil {
			return "", "", nil, uploadErr(err)
		}
		switch part.FormName() {
		case "file":
			body, err := readChunks(part, limit, size+1)
			if err != nil {
				return "", "", nil, uploadErr(err)
			}
			filename, content = part.FileName(), body.Bytes()
		case "purpose":
			v, err := readChunks(part, uploadFieldBytes, 0)
			if errors.Is(err, errTooLarge) {
				return "", "", nil, fmt.Errorf("purpose: longer than %d bytes", uploadFieldBytes)
			}
			if err != nil {
				return "", "", nil, uploadErr(err)
			}
			purpose = string(v.Bytes())
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return "", "", nil, uploadErr(err)
			}
		}
	}
}

// uploadErr is a failed read of an upload: errTooLarge for a body over
// its cap (the request's MaxBytesReader), the error as it is otherwise.
func uploadErr(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errTooLarge
	}
	if errors.Is(err, errTooLarge) {
		return err
	}
	return fmt.Errorf("reading the upload: %w", err)
}

func (a *API) serveFileGet(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	if f, ok := a.ownFile(w, r, p, r.PathValue("id"), false); ok {
		writeJSON(w, http.StatusOK, openAIFile(f))
	}
}

func (a *API) serveFileContent(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	f, ok := a.ownFile(w, r, p, r.PathValue("id"), true)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(f.Content)
}

func (a *API) serveFileDelete(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	id := r.PathValue("id")
	if _, _, batch := batchFile(id); batch {
		p.fail(w, http.StatusBadRequest, "file %s is a batch's results, kept with the batch: it cannot be deleted alone", id)
		return
	}
	if _, ok := a.ownFile(w, r, p, id, false); !ok {
		return
	}
	if err := a.store.DeleteFile(r.Context(), id); err != nil && !errors.Is(err, jobstore.ErrNotFound) {
		a.storeFail(w, p, "deleting the file", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

// serveFileList answers the caller's uploaded files on this upstream,
// newest first (?purpose=, ?after=, ?limit= 1 to 100, default 20).
func (a *API) serveFileList(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	limit, err := listLimit(r)
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	q := r.URL.Query()
	fs, err := a.store.ListFiles(r.Context(), jobstore.ListFilesParams{Client: p.client, Upstream: p.upstream, Purpose: q.Get("purpose"),
		After: q.Get("after"), Limit: limit + 1})
	if err != nil {
		a.storeFail(w, p, "listing files", err)
		return
	}
	out := openAIList[OpenAIFile]{Object: "list", Data: []OpenAIFile{}, HasMore: len(fs) > limit}
	for _, f := range fs[:min(len(fs), limit)] {
		out.Data = append(out.Data, openAIFile(f))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
