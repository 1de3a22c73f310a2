package mock

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// The issue-25 endpoints through the official SDKs: their decoders are the
// proof that the shapes are right.

func TestSDKResponses(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 500, TPM: 200_000}, OutputTokens: OutputRange{Min: 6, Max: 6}})
	c := openAIClient(s.URL())
	var raw *http.Response
	doc := strings.Repeat("lorem ipsum ", 500) // 1500 tokens
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "gpt-4.1", Instructions: openai.String("Answer briefly."), MaxOutputTokens: openai.Int(64),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(doc)},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, r.Status)
	require.Len(t, strings.Fields(r.OutputText()), 6)
	require.Equal(t, responses.ResponseServiceTierDefault, r.ServiceTier)
	require.Equal(t, int64(1504), r.Usage.InputTokens)
	require.Equal(t, int64(6), r.Usage.OutputTokens)
	require.Equal(t, int64(1510), r.Usage.TotalTokens)
	require.Zero(t, r.Usage.InputTokensDetails.CachedTokens)
	require.Zero(t, r.Usage.OutputTokensDetails.ReasoningTokens)
	require.Equal(t, "499", raw.Header.Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "198432", raw.Header.Get("x-ratelimit-remaining-tokens"), "at admission: 1504 input + 64 reserved")

	// The next turn: the previous input and output are input again, and
	// their prefix comes from the key's cache.
	next, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "gpt-4.1", Instructions: openai.String("Answer briefly."), PreviousResponseID: openai.String(r.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And then?")},
	})
	require.NoError(t, err)
	require.Greater(t, next.Usage.InputTokens, r.Usage.InputTokens+r.Usage.OutputTokens)
	require.Equal(t, int64(1024+3*128), next.Usage.InputTokensDetails.CachedTokens)

	got, err := c.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, r.OutputText(), got.OutputText())
	items, err := c.Responses.InputItems.List(t.Context(), r.ID, responses.InputItemListParams{})
	require.NoError(t, err)
	require.Len(t, items.Data, 1)
	require.NoError(t, c.Responses.Delete(t.Context(), r.ID))
	_, err = c.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)

	// Reasoning, a flex tier, and a background response cancelled at once.
	rr, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "o4-mini", ServiceTier: responses.ResponseNewParamsServiceTierFlex,
		Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffortLow},
		Input:     responses.ResponseNewParamsInputUnion{OfString: openai.String("think")},
	})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseServiceTierFlex, rr.ServiceTier)
	require.Equal(t, int64(2), rr.Usage.OutputTokensDetails.ReasoningTokens)
	require.Len(t, rr.Output, 2)
	require.Equal(t, "reasoning", rr.Output[0].Type)
	bg, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "gpt-4.1", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("later")},
	})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusQueued, bg.Status)
	done, err := c.Responses.Get(t.Context(), bg.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, done.Status, "no latency configured: done at once")
}

func TestSDKResponsesStream(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{OutputTokens: OutputRange{Min: 8, Max: 8}})
	c := openAIClient(s.URL())
	stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there")},
	})
	var text strings.Builder
	var completed responses.Response
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, "response.created", types[0])
	require.Equal(t, "response.completed", types[len(types)-1])
	require.Equal(t, text.String(), completed.OutputText())
	require.Len(t, strings.Fields(text.String()), 8)
	require.Equal(t, int64(3), completed.Usage.InputTokens)
	require.Equal(t, int64(8), completed.Usage.OutputTokens)
	require.Equal(t, responses.ResponseStatusCompleted, completed.Status)
}

func TestSDKEmbeddings(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 3000, TPM: 1_000_000}})
	c := openAIClient(s.URL())
	var raw *http.Response
	e, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Small,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text", "the second text"}},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Len(t, e.Data, 2)
	require.Len(t, e.Data[0].Embedding, 1536)
	require.Equal(t, int64(7), e.Usage.PromptTokens) // 3 + 4
	require.Equal(t, int64(7), e.Usage.TotalTokens)
	require.Equal(t, "2999", raw.Header.Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "999993", raw.Header.Get("x-ratelimit-remaining-tokens"))
	b64, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Small, Dimensions: openai.Int(1536),
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text"}},
	})
	require.NoError(t, err)
	require.Equal(t, e.Data[0].Embedding, b64.Data[0].Embedding, "the SDK decodes base64 to the same vector")
	short, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Large, Dimensions: openai.Int(256),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}},
	})
	require.NoError(t, err)
	require.Len(t, short.Data[0].Embedding, 256)
	require.Equal(t, int64(3), short.Usage.PromptTokens)
}

func TestSDKAnthropicCountTokens(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000, CountTokensRPM: 100}})
	c := anthropicClient(s.URL())
	system := []anthropic.TextBlockParam{{Text: "You answer in one word."}}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What colour is the sky?"))}
	var raw *http.Response
	n, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model: "claude-sonnet-4-5", Messages: msgs,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: system},
	}, aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "100", raw.Header.Get("anthropic-ratelimit-requests-limit"), "its own bucket")
	require.Equal(t, "99", raw.Header.Get("anthropic-ratelimit-requests-remaining"))
	require.Empty(t, raw.Header.Get("anthropic-ratelimit-input-tokens-limit"))
	msg, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8, System: system, Messages: msgs},
		aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, n.InputTokens, msg.Usage.InputTokens+msg.Usage.CacheCreationInputTokens+msg.Usage.CacheReadInputTokens)
	require.Equal(t, "49", raw.Header.Get("anthropic-ratelimit-requests-remaining"), "count_tokens took nothing from messages")
}

// TestSDKResponsesInputTokens: openai-go's InputTokens.Count decodes the
// mock's answer, whose count is the create's usage.input_tokens.
func TestSDKResponsesInputTokens(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 500, TPM: 200_000, CountTokensRPM: 60}})
	c := openAIClient(s.URL())
	var raw *http.Response
	n, err := c.Responses.InputTokens.Count(t.Context(), responses.InputTokenCountParams{
		Model: openai.String("gpt-4.1"), Instructions: openai.String("Answer briefly."),
		Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("What colour is the sky?")},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "response.input_tokens", string(n.Object))
	require.Equal(t, "60", raw.Header.Get("x-ratelimit-limit-requests"), "its own bucket")
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: "gpt-4.1", Instructions: openai.String("Answer briefly."), MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What colour is the sky?")},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, r.Usage.InputTokens, n.InputTokens)
	require.Equal(t, "499", raw.Header.Get("x-ratelimit-remaining-requests"), "counting took nothing from the Responses API")
}

// TestSDKAnthropicPromptCache sends the same cache_control request twice:
// a 1h write, then a read that ITPM does not charge.
func TestSDKAnthropicPromptCache(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{ITPM: 100_000}, OutputTokens: OutputRange{Min: 2, Max: 2}})
	c := anthropicClient(s.URL())
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
		System: []anthropic.TextBlockParam{{Text: strings.Repeat("Background fact. ", 4706), // 80,002 bytes: 20,001 tokens
			CacheControl: anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Question one?"))}}
	var raw *http.Response
	first, err := c.Messages.New(t.Context(), params, aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, int64(20_001), first.Usage.CacheCreationInputTokens)
	require.Equal(t, int64(20_001), first.Usage.CacheCreation.Ephemeral1hInputTokens)
	require.Zero(t, first.Usage.CacheCreation.Ephemeral5mInputTokens)
	require.Zero(t, first.Usage.CacheReadInputTokens)
	require.Equal(t, int64(3), first.Usage.InputTokens, "only what follows the breakpoint (20,004 in all)")
	require.Equal(t, anthropic.UsageServiceTierStandard, first.Usage.ServiceTier)
	require.Equal(t, "80000", raw.Header.Get("anthropic-ratelimit-input-tokens-remaining"), "100,000 − 20,004, rounded")
	second, err := c.Messages.New(t.Context(), params, aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Zero(t, second.Usage.CacheCreationInputTokens)
	require.Equal(t, int64(20_001), second.Usage.CacheReadInputTokens)
	require.Equal(t, int64(3), second.Usage.InputTokens)
	require.Equal(t, "80000", raw.Header.Get("anthropic-ratelimit-input-tokens-remaining"), "the read is not charged to ITPM")
	st := s.Stats().Keys["sk-ant-test"]
	require.Equal(t, CacheCounts{PromptTokens: 2 * 20_004, ReadTokens: 20_001, WriteTokens: 20_001, Write1hTokens: 20_001, Hits: 1}, st.Cache)
}
