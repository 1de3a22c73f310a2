package llm

import "time"

// The providers' Batch API objects, as they travel on the wire: Sluice
// answers them (its own batch endpoints) and reads them (its client of the
// providers' Batch APIs), so they are defined once here.

// MessageBatch is Anthropic's message_batch object.
type MessageBatch struct {
	ID                string             `json:"id"`
	Type              string             `json:"type"`
	ProcessingStatus  string             `json:"processing_status"`
	RequestCounts     MessageBatchCounts `json:"request_counts"`
	EndedAt           *time.Time         `json:"ended_at"`
	CreatedAt         time.Time          `json:"created_at"`
	ExpiresAt         time.Time          `json:"expires_at"`
	ArchivedAt        *time.Time         `json:"archived_at"`
	CancelInitiatedAt *time.Time         `json:"cancel_initiated_at"`
	ResultsURL        *string            `json:"results_url"`
}

// Anthropic's processing_status values.
const (
	MessageBatchInProgress = "in_progress"
	MessageBatchCanceling  = "canceling"
	MessageBatchEnded      = "ended"
)

// MessageBatchCounts are Anthropic's per-result request counts (all but
// Processing stay 0 until the batch has ended).
type MessageBatchCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

// MessageBatchList is the body of GET /v1/messages/batches.
type MessageBatchList struct {
	Data    []MessageBatch `json:"data"`
	HasMore bool           `json:"has_more"`
	FirstID *string        `json:"first_id"`
	LastID  *string        `json:"last_id"`
}

// OpenAIBatch is OpenAI's batch object.
type OpenAIBatch struct {
	ID               string             `json:"id"`
	Object           string             `json:"object"`
	Endpoint         string             `json:"endpoint"`
	Errors           *OpenAIBatchErrors `json:"errors"`
	InputFileID      string             `json:"input_file_id"`
	CompletionWindow string             `json:"completion_window"`
	Status           string             `json:"status"`
	OutputFileID     *string            `json:"output_file_id"`
	ErrorFileID      *string            `json:"error_file_id"`
	CreatedAt        int64              `json:"created_at"`
	InProgressAt     *int64             `json:"in_progress_at"`
	ExpiresAt        int64              `json:"expires_at"`
	FinalizingAt     *int64             `json:"finalizing_at"`
	CompletedAt      *int64             `json:"completed_at"`
	FailedAt         *int64             `json:"failed_at"`
	ExpiredAt        *int64             `json:"expired_at"`
	CancellingAt     *int64             `json:"cancelling_at"`
	CancelledAt      *int64             `json:"cancelled_at"`
	RequestCounts    OpenAIBatchCounts  `json:"request_counts"`
	Metadata         map[string]string  `json:"metadata"`
}

// OpenAI's batch status values.
const (
	OpenAIBatchValidating = "validating"
	OpenAIBatchFailed     = "failed"
	OpenAIBatchInProgress = "in_progress"
	OpenAIBatchFinalizing = "finalizing"
	OpenAIBatchCompleted  = "completed"
	OpenAIBatchExpired    = "expired"
	OpenAIBatchCancelling = "cancelling"
	OpenAIBatchCancelled  = "cancelled"
)

// OpenAIBatchErrors is the errors list of a batch that failed validation.
type OpenAIBatchErrors struct {
	Object string             `json:"object"`
	Data   []OpenAIBatchError `json:"data"`
}

// OpenAIBatchError is one error of a batch's input file (Line is 1-based,
// nil for the file as a whole).
type OpenAIBatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// OpenAIBatchCounts are OpenAI's request counts.
type OpenAIBatchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// OpenAIFile is OpenAI's file object.
type OpenAIFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
}
