package provider

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
)

// Endpoint is the API a request is sent to within its protocol: it decides
// how its body is priced (EstimateFor), how its response reports usage and
// how its stream is read (NewStreamObserverFor). The zero value is
// EndpointChat.
type Endpoint int

// The endpoints Sluice meters.
const (
	// EndpointChat is the protocol's conversational endpoint: Anthropic
	// POST /v1/messages, OpenAI POST /v1/chat/completions.
	EndpointChat Endpoint = iota
	// EndpointResponses is OpenAI's POST /v1/responses.
	EndpointResponses
	// EndpointEmbeddings is OpenAI's POST /v1/embeddings.
	EndpointEmbeddings
	// EndpointCountTokens is token counting: Anthropic's POST
	// /v1/messages/count_tokens, OpenAI's POST /v1/responses/input_tokens.
	// Free, on its own request limit, no output.
	EndpointCountTokens
)

var endpointNames = [...]string{"chat", "responses", "embeddings", "count_tokens"}

func (e Endpoint) String() string {
	if e < 0 || int(e) >= len(endpointNames) {
		return fmt.Sprintf("endpoint(%d)", int(e))
	}
	return endpointNames[e]
}

// EndpointOf returns the endpoint a request path creates on protocol p, by
// its last segments, so that a base path in front (/openai/v1/responses)
// does not matter: …/messages and …/messages/count_tokens on Anthropic;
// …/chat/completions, …/responses, …/responses/input_tokens and
// …/embeddings on OpenAI. Any other
// path (a retrieval such as /v1/responses/{id}, batches, files, models) is
// none of them: false.
func EndpointOf(p llm.Protocol, path string) (Endpoint, bool) {
	path = strings.TrimRight(path, "/")
	if p == llm.Anthropic {
		switch {
		case strings.HasSuffix(path, "/messages/count_tokens"):
			return EndpointCountTokens, true
		case strings.HasSuffix(path, "/messages"):
			return EndpointChat, true
		}
		return 0, false
	}
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return EndpointChat, true
	case strings.HasSuffix(path, "/responses/input_tokens"):
		return EndpointCountTokens, true
	case strings.HasSuffix(path, "/responses"):
		return EndpointResponses, true
	case strings.HasSuffix(path, "/embeddings"):
		return EndpointEmbeddings, true
	}
	return 0, false
}

// Scheduled reports whether Sluice schedules and meters e: sends it
// through the engine (priority, quota admission, retries, budgets)
// rather than passing it through. Every front door asks this one rule.
func (e Endpoint) Scheduled() bool {
	switch e {
	case EndpointChat, EndpointResponses, EndpointEmbeddings:
		return true
	case EndpointCountTokens:
		return false // its own per-key bucket, never the messages queue
	}
	return false
}

// Path returns the provider path of endpoint e on protocol p
// (/v1/messages, /v1/chat/completions, /v1/responses, /v1/embeddings,
// /v1/messages/count_tokens, /v1/responses/input_tokens), or "" for an
// endpoint foreign to p.
func (e Endpoint) Path(p llm.Protocol) string {
	switch {
	case e == EndpointChat && p == llm.Anthropic:
		return "/v1/messages"
	case e == EndpointChat:
		return "/v1/chat/completions"
	case e == EndpointCountTokens && p == llm.Anthropic:
		return "/v1/messages/count_tokens"
	case e == EndpointCountTokens && p == llm.OpenAI:
		return "/v1/responses/input_tokens"
	case e == EndpointResponses && p == llm.OpenAI:
		return "/v1/responses"
	case e == EndpointEmbeddings && p == llm.OpenAI:
		return "/v1/embeddings"
	}
	return ""
}

// ScheduledEndpoint returns the endpoint a request to path (its query
// ignored) with method creates on protocol p when Sluice schedules it: a
// POST to the endpoint's own path (Endpoint.Path) of a Scheduled
// endpoint. Anything else (a retrieval such as GET /v1/responses/{id},
// batches, files, models) is passed through: false.
func ScheduledEndpoint(p llm.Protocol, method, path string) (Endpoint, bool) {
	if method != "" && method != "POST" {
		return 0, false
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	e, ok := EndpointOf(p, path)
	if !ok || !e.Scheduled() || path != e.Path(p) {
		return 0, false
	}
	return e, true
}

// ScheduledPaths lists the paths ScheduledEndpoint accepts on protocol p,
// for error messages and docs.
func ScheduledPaths(p llm.Protocol) []string {
	var out []string
	for e := range Endpoint(len(endpointNames)) {
		if path := e.Path(p); path != "" && e.Scheduled() {
			out = append(out, path)
		}
	}
	return out
}

// ForeignEndpoint returns the protocol whose endpoint a POST to path (its
// query ignored) names when that path is not one of protocol p's own: an
// OpenAI POST /v1/chat/completions sent to an Anthropic upstream, or an
// Anthropic POST /v1/messages sent to an OpenAI one. Such a request is a
// client pointed at the wrong upstream; passed through, it would reach the
// provider unscheduled and unmetered. Any other request: false.
func ForeignEndpoint(p llm.Protocol, method, path string) (llm.Protocol, bool) {
	if method != "POST" {
		return "", false
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	for _, other := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		if other == p {
			continue
		}
		for e := range Endpoint(len(endpointNames)) {
			if own := e.Path(other); own != "" && own == path && e.Path(p) != path {
				return other, true
			}
		}
	}
	return "", false
}

// ProtocolAPI names the API protocol p speaks, for error messages: "the
// Anthropic Messages API", "the OpenAI API".
func ProtocolAPI(p llm.Protocol) string {
	if p == llm.Anthropic {
		return "the Anthropic Messages API"
	}
	return "the OpenAI API (Chat Completions, Responses, Embeddings)"
}

// CountsTokens reports whether a POST to path (its query ignored) is
// token counting on either protocol: …/messages/count_tokens (Anthropic)
// or …/responses/input_tokens (OpenAI). The providers charge it nothing.
func CountsTokens(path string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		if e, ok := EndpointOf(p, path); ok && e == EndpointCountTokens {
			return true
		}
	}
	return false
}

// ResponsesPathID returns the response id a path under /v1/responses/
// names (GET or DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel,
// GET /v1/responses/{id}/input_items; the query ignored), and false for
// any other path (/v1/responses/input_tokens is token counting, not a
// response). Only the key that created a response can reach it.
func ResponsesPathID(path string) (string, bool) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	rest, ok := strings.CutPrefix(path, "/v1/responses/")
	if !ok {
		return "", false
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch sub {
	case "", "cancel", "input_items":
	default:
		return "", false
	}
	if id == "" || (sub == "" && id == "input_tokens") {
		return "", false
	}
	return id, true
}
