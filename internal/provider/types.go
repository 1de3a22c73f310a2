package provider

import (
	"time"
)

// Cost is what a request is expected to take from each quota dimension,
// estimated before it is sent.
type Cost struct {
	// Model is the request's model field.
	Model string
	// InputTokens is the conservative estimate of prompt tokens
	// (system + messages + tools).
	InputTokens int64
	// OutputTokens is the output reservation: max_tokens (or
	// max_completion_tokens) times n.
	OutputTokens int64
	// Stream reports whether the request asked for a streamed response.
	Stream bool
	// PreviousResponseID is an OpenAI Responses request's
	// previous_response_id: the provider adds that response's input and
	// output to InputTokens, which the body does not show (a caller that
	// remembers its usage adds it), and only the key (project) that created
	// it can continue it.
	PreviousResponseID string
	// ServiceTier is the request's service_tier ("" when absent): OpenAI
	// auto, default, flex, scale or priority; Anthropic auto or
	// standard_only. The tier that served it is in the response's usage
	// (llm.Usage.ServiceTier).
	ServiceTier string
}

// Dimension names one quota dimension in a rate-limit snapshot.
type Dimension string

// Quota dimensions reported by the providers' rate-limit headers.
const (
	DimRequests     Dimension = "requests"
	DimTokens       Dimension = "tokens"        // combined input+output (llm.OpenAI TPM, llm.Anthropic tokens-*)
	DimInputTokens  Dimension = "input_tokens"  // llm.Anthropic ITPM
	DimOutputTokens Dimension = "output_tokens" // llm.Anthropic OTPM
)

// Bucket is the provider's view of one quota dimension.
type Bucket struct {
	// Limit is the bucket's capacity (per-minute limit); -1 when unknown.
	Limit int64
	// Remaining is the level left; -1 when unknown.
	Remaining int64
	// Reset is the instant the bucket is full again; zero when unknown.
	Reset time.Time
}

// RateLimits is a snapshot of the provider's rate-limit headers, one Bucket
// per dimension the response reported.
type RateLimits map[Dimension]Bucket
