package batches

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// OpenAI Batch: the lines are uploaded as a JSONL file (purpose "batch"),
// then POST /v1/batches names it; the results are the batch's output and
// error files.

// OpenAIEndpoints are the endpoints an OpenAI batch may carry.
var OpenAIEndpoints = []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"}

func (c *Client) createOpenAI(ctx context.Context, p CreateParams) (*Batch, error) {
	endpoint := p.Endpoint
	if endpoint == "" {
		endpoint = OpenAIEndpoints[0]
	}
	if !slices.Contains(OpenAIEndpoints, endpoint) {
		return nil, fmt.Errorf("creating the batch: %w: endpoint %q is not one of %v", ErrInvalid, endpoint, OpenAIEndpoints)
	}
	fileID, err := c.uploadLines(ctx, endpoint, p.Lines)
	if err != nil {
		return nil, err
	}
	req, err := json.Marshal(map[string]any{"input_file_id": fileID, "endpoint": endpoint, "completion_window": "24h", "metadata": p.Metadata})
	if err != nil {
		return nil, fmt.Errorf("creating the batch: %w", err)
	}
	b, err := c.openAIBatch(ctx, request{op: "creating the batch", method: http.MethodPost, path: "/v1/batches", body: bytes.NewReader(req)})
	if err != nil {
		// No batch names the file: take it back (best effort, on a
		// context that outlives a cancelled create).
		if derr := c.DeleteFile(context.WithoutCancel(ctx), fileID); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	return b, b.Err()
}

// uploadLines uploads the batch input file and returns its id.
func (c *Client) uploadLines(ctx context.Context, endpoint string, lines []Line) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return "", fmt.Errorf("uploading the batch file: %w", err)
	}
	fw, err := mw.CreateFormFile("file", "batch.jsonl")
	if err != nil {
		return "", fmt.Errorf("uploading the batch file: %w", err)
	}
	ep, _ := json.Marshal(endpoint)
	for _, l := range lines {
		id, err := json.Marshal(l.CustomID)
		if err != nil {
			return "", fmt.Errorf("uploading the batch file: %w", err)
		}
		line := bytes.Join([][]byte{[]byte(`{"custom_id":`), id, []byte(`,"method":"POST","url":`), ep,
			[]byte(`,"body":`), compact(l.Body), []byte("}\n")}, nil)
		if _, err := fw.Write(line); err != nil {
			return "", fmt.Errorf("uploading the batch file: %w", err)
		}
	}
	if err := mw.Close(); err != nil {
		return "", fmt.Errorf("uploading the batch file: %w", err)
	}
	var f llm.OpenAIFile
	if err := c.call(ctx, request{op: "uploading the batch file", method: http.MethodPost, path: "/v1/files", body: &body,
		contentType: mw.FormDataContentType()}, &f); err != nil {
		return "", err
	}
	return f.ID, nil
}

// compact is a body on one line (a JSONL line may hold no newline).
func compact(b json.RawMessage) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return bytes.TrimSpace(b) // checkLines made sure it is valid
	}
	return buf.Bytes()
}

func (c *Client) openAIBatch(ctx context.Context, r request) (*Batch, error) {
	var ob llm.OpenAIBatch
	if err := c.call(ctx, r, &ob); err != nil {
		return nil, err
	}
	return fromOpenAIBatch(ob), nil
}

func fromOpenAIBatch(ob llm.OpenAIBatch) *Batch {
	n := ob.RequestCounts
	b := &Batch{ID: ob.ID, Status: ob.Status, CreatedAt: time.Unix(ob.CreatedAt, 0).UTC(), ExpiresAt: time.Unix(ob.ExpiresAt, 0).UTC(),
		InputFileID: ob.InputFileID, OutputFileID: str(ob.OutputFileID), ErrorFileID: str(ob.ErrorFileID), Metadata: ob.Metadata,
		Counts: Counts{Total: n.Total, Succeeded: n.Completed, Errored: n.Failed, Processing: max(0, n.Total-n.Completed-n.Failed)}}
	switch ob.Status {
	case llm.OpenAIBatchCompleted, llm.OpenAIBatchFailed, llm.OpenAIBatchExpired, llm.OpenAIBatchCancelled:
		b.Ended, b.Counts.Processing = true, 0
	}
	for _, t := range []*int64{ob.CompletedAt, ob.FailedAt, ob.ExpiredAt, ob.CancelledAt} {
		if t != nil && b.Ended {
			b.EndedAt = time.Unix(*t, 0).UTC()
		}
	}
	if ob.CancellingAt != nil {
		b.CancelAt = time.Unix(*ob.CancellingAt, 0).UTC()
	}
	if ob.Errors != nil {
		b.Errors = ob.Errors.Data
	}
	return b
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
