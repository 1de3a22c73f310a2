package mock

import (
	"encoding/json"
	"strings"
)

// OpenAI embeddings bodies: input is a string, an array of strings, an
// array of token ids or an array of arrays of token ids. A string counts
// ceil(bytes/4) tokens, a token array its length.

// embeddingsRequest is a parsed embeddings body.
type embeddingsRequest struct {
	request
	inputs     []embeddingInput
	base64     bool
	dimensions int
}

// embeddingInput is one input: its text (or its tokens rendered as text,
// to seed the vector) and its token count.
type embeddingInput struct {
	seed   string
	tokens int64
}

// Embedding limits: at most 2048 inputs, each at most 8192 tokens.
const (
	maxEmbeddingInputs = 2048
	maxEmbeddingTokens = 8192
)

// embeddingDimensions is a model's vector length.
func embeddingDimensions(model string) int {
	if strings.Contains(model, "3-large") {
		return 3072
	}
	return 1536
}

func invalidInput() *apiError {
	return openAIInvalid("input", "invalid_value", "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.")
}

// parseEmbeddingInputs reads the input union.
func parseEmbeddingInputs(raw json.RawMessage) ([]embeddingInput, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalidInput()
		}
		return []embeddingInput{{s, tokensOf(len(s))}}, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		out := make([]embeddingInput, len(strs))
		for i, s := range strs {
			if s == "" {
				return nil, invalidInput()
			}
			out[i] = embeddingInput{s, tokensOf(len(s))}
		}
		return out, nil
	}
	var toks []int64
	if json.Unmarshal(raw, &toks) == nil && len(toks) > 0 {
		return []embeddingInput{{string(raw), int64(len(toks))}}, nil
	}
	var arrays []json.RawMessage
	if json.Unmarshal(raw, &arrays) == nil && len(arrays) > 0 {
		out := make([]embeddingInput, len(arrays))
		for i, a := range arrays {
			if json.Unmarshal(a, &toks) != nil || len(toks) == 0 {
				return nil, invalidInput()
			}
			out[i] = embeddingInput{string(a), int64(len(toks))}
		}
		return out, nil
	}
	return nil, invalidInput()
}

func parseEmbeddings(body []byte) (embeddingsRequest, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return embeddingsRequest{}, openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err)
	}
	r := embeddingsRequest{request: request{n: 1, bodyHash: bodyHash(body)}}
	if !present(top["model"]) {
		return embeddingsRequest{}, openAIInvalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return embeddingsRequest{}, openAIInvalid("model", "invalid_type", "Invalid type for 'model': expected a non-empty string.")
	}
	if !present(top["input"]) {
		return embeddingsRequest{}, openAIInvalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	inputs, aerr := parseEmbeddingInputs(top["input"])
	if aerr != nil {
		return embeddingsRequest{}, aerr
	}
	if len(inputs) > maxEmbeddingInputs {
		return embeddingsRequest{}, openAIInvalid("input", "invalid_value",
			"Invalid 'input': maximum length of array is %d, got %d.", maxEmbeddingInputs, len(inputs))
	}
	for _, in := range inputs {
		if in.tokens > maxEmbeddingTokens {
			return embeddingsRequest{}, openAIInvalid("input", "context_length_exceeded",
				"This model's maximum context length is %d tokens, however you requested %d tokens (%d in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",
				maxEmbeddingTokens, in.tokens, in.tokens)
		}
		r.inputTokens += in.tokens
	}
	r.inputs = inputs
	if present(top["encoding_format"]) {
		var f string
		_ = json.Unmarshal(top["encoding_format"], &f)
		switch f {
		case "float":
		case "base64":
			r.base64 = true
		default:
			return embeddingsRequest{}, openAIInvalid("encoding_format", "invalid_value",
				"Invalid value for 'encoding_format': supported values are 'float' and 'base64'.")
		}
	}
	r.dimensions = embeddingDimensions(r.model)
	if present(top["dimensions"]) {
		var d int
		if err := json.Unmarshal(top["dimensions"], &d); err != nil || d < 1 || d > r.dimensions {
			return embeddingsRequest{}, openAIInvalid("dimensions", "invalid_value",
				"Invalid 'dimensions': expected an integer between 1 and %d.", r.dimensions)
		}
		if !strings.Contains(r.model, "embedding-3") {
			return embeddingsRequest{}, openAIInvalid("dimensions", "", "This model does not support specifying dimensions.")
		}
		r.dimensions = d
	}
	return r, nil
}
