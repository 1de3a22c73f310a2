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
	// EndpointCountTokens is Anthropic's POST /v1/messages/count_tokens:
	// free, on its own request limit, no output.
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
// …/chat/completions, …/responses and …/embeddings on OpenAI. Any other
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
	case strings.HasSuffix(path, "/responses"):
		return EndpointResponses, true
	case strings.HasSuffix(path, "/embeddings"):
		return EndpointEmbeddings, true
	}
	return 0, false
}
