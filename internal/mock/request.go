package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The mock parses request bodies itself (it must not share parsing code with
// the gateway it tests): anthropic_request.go, openai_request.go,
// responses_request.go and embeddings_request.go build a request whose
// input is a prompt (prompt.go).

// request is what the mock needs from a parsed request body.
type request struct {
	model string
	// maxTokens is the output bound per choice: Anthropic max_tokens,
	// OpenAI max_completion_tokens | max_tokens | max_output_tokens |
	// Config.DefaultMaxTokens; 0 for requests without output (embeddings).
	maxTokens int64
	n         int // OpenAI choices; 1 otherwise
	stream    bool
	// includeUsage is OpenAI stream_options.include_usage.
	includeUsage bool
	// prompt is the input; inputTokens its token count.
	prompt      *prompt
	inputTokens int64
	// tier is the requested service_tier ("" when absent).
	tier string
	// cacheTTL is how long the OpenAI prefixes this request writes stay
	// cached (prompt_cache_retention).
	cacheTTL time.Duration
	// bodyHash seeds the generated reply.
	bodyHash uint64
	// fixedOutput is the reply length asked for in HeaderOutputTokens
	// (0 when absent).
	fixedOutput int64
}

// HeaderOutputTokens, on a request, fixes the length of each reply choice
// to min(N, max_tokens) tokens instead of drawing it from
// Config.OutputTokens, so a replayed trace gets the lengths it recorded.
// It is not a provider header; a gateway forwards it like any other.
const HeaderOutputTokens = "X-Mock-Output-Tokens"

// OutputTokensHeaderMax is the largest value HeaderOutputTokens accepts.
const OutputTokensHeaderMax = 1_000_000

// outputTokensHeader reads HeaderOutputTokens: 0 when absent, else an
// integer in [1, OutputTokensHeaderMax] given once; anything else is a
// 400 in the protocol's shape.
func outputTokensHeader(h http.Header, proto string) (int64, *apiError) {
	vals := h.Values(HeaderOutputTokens)
	if len(vals) == 0 {
		return 0, nil
	}
	bad := func(format string, args ...any) (int64, *apiError) {
		e := invalid(format, args...)
		if proto == protoOpenAI {
			e.code = "invalid_value"
		}
		return 0, e
	}
	if len(vals) > 1 {
		return bad("%s: give one value, got %d", HeaderOutputTokens, len(vals))
	}
	v := strings.TrimSpace(vals[0])
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > OutputTokensHeaderMax {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return bad("%s: must be an integer between 1 and %d, got %q", HeaderOutputTokens, OutputTokensHeaderMax, v)
	}
	return n, nil
}

// replyLength is the length of reply choice: the fixed length capped by
// max_tokens when the request asked for one, else drawn as outputLength
// does.
func (r request) replyLength(out OutputRange, seed uint64, choice int) int64 {
	if r.fixedOutput > 0 {
		return min(r.fixedOutput, r.maxTokens)
	}
	return outputLength(out, seed, r.bodyHash, choice, r.maxTokens)
}

// apiError is an error answer before it is put in a protocol's envelope.
type apiError struct {
	status  int
	typ     string // Anthropic error.type / OpenAI error.type
	message string
	param   string // OpenAI only
	code    string // OpenAI only
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.typ, e.message) }

func invalid(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
}

func openAIInvalid(param, code, format string, args ...any) *apiError {
	e := invalid(format, args...)
	e.param, e.code = param, code
	return e
}

func bodyHash(body []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(body)
	return h.Sum64()
}

func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, fmt.Errorf("body is null")
	}
	return top, nil
}

func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// withoutCacheControl is a block's raw JSON without its cache_control
// member, so that moving a breakpoint does not change what the block
// counts or how it hashes. Blocks without one come back unchanged.
func withoutCacheControl(raw json.RawMessage) string {
	if !bytes.Contains(raw, []byte(`"cache_control"`)) {
		return string(raw)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return string(raw)
	}
	if _, ok := m["cache_control"]; !ok {
		return string(raw)
	}
	delete(m, "cache_control")
	b, err := json.Marshal(m)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
