package jobsapi

import (
	"bytes"
	"errors"
	"io"
	"mime"
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
		b, err := a.store.GetBatch(r.Context(), batchID)
		if err == nil && b.Client == p.client && b.Upstream == p.upstream && b.Ended() {
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
		if err != nil && !errors.Is(err, jobstore.ErrNotFound) {
			a.storeFail(w, p, "loading the batch", err)
			return nil, false
		}
		p.fail(w, http.StatusNotFound, "no file %q", id)
		return nil, false
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

// bufferWriter is an http.ResponseWriter over a buffer, for writeResults.
type bufferWriter struct{ *bytes.Buffer }

func (bufferWriter) Header() http.Header { return http.Header{} }
func (bufferWriter) WriteHeader(int)     {}

// serveFileCreate stores a multipart upload: "purpose" (batch) and "file".
func (a *API) serveFileCreate(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	if r.ContentLength > a.cfg.MaxBatchBytes {
		p.fail(w, http.StatusRequestEntityTooLarge, "the upload exceeds %d bytes", a.cfg.MaxBatchBytes)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		p.fail(w, http.StatusBadRequest, "upload the file as multipart/form-data with the fields purpose and file")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.MaxBatchBytes+1<<20) // the file and the form around it
	reader, err := r.MultipartReader()
	if err != nil {
		p.fail(w, http.StatusBadRequest, "reading the upload: %v", err)
		return
	}
	var purpose, filename string
	var content []byte
	for {
		part, err := reader.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.fail(w, http.StatusBadRequest, "reading the upload: %v", err)
			return
		}
		data, err := io.ReadAll(io.LimitReader(part, a.cfg.MaxBatchBytes+1))
		if err != nil {
			p.fail(w, http.StatusBadRequest, "reading the upload: %v", err)
			return
		}
		switch part.FormName() {
		case "purpose":
			purpose = string(data)
		case "file":
			filename, content = part.FileName(), data
		}
	}
	switch {
	case content == nil:
		p.fail(w, http.StatusBadRequest, "file is required")
		return
	case int64(len(content)) > a.cfg.MaxBatchBytes:
		p.fail(w, http.StatusRequestEntityTooLarge, "the file exceeds %d bytes", a.cfg.MaxBatchBytes)
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
