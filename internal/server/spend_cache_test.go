package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// cachePrices price one model per protocol with every cache rate apart
// (USD per million tokens), so a charge at the wrong rate shows.
var cachePrices = pricing.Config{Models: map[string]pricing.Price{
	"claude-x": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 6},
	"gpt-x":    {Input: 2, Output: 8, CacheRead: 0.5},
}}

// cacheSpendGateway is a gateway at prices with an Anthropic upstream (a)
// and an OpenAI one (o) on the mock, and the client team with budget;
// spent reads team's spend once nothing is reserved.
func cacheSpendGateway(t *testing.T, prices pricing.Config, budget admit.Budget) (base string, spent func() float64) {
	t.Helper()
	m := startSpendMock(t)
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: prices, Clients: budgetClient(budget),
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-a"},
			{Name: "o", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-o"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base = "http://" + g.Addr()
	return base, func() float64 {
		var team admit.ClientSpend
		require.Eventually(t, func() bool {
			team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
			return team.ReservedUSD == 0
		}, 10*time.Second, 10*time.Millisecond)
		return team.Day.SpentUSD
	}
}

// TestBudgetChargesAnthropicCachePrices: a budgeted client sends the same
// cache_control request twice through the gateway on a priced Claude
// model: the first writes the prefix, the second reads it, and each is
// charged uncached × input + writes × cache_write (cache_write_1h for a
// 1-hour breakpoint) + reads × cache_read + output × output, priced here
// from the usage the mock reported.
func TestBudgetChargesAnthropicCachePrices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		control string
		write   float64 // the write rate expected
	}{
		{"5 minutes", `{"type":"ephemeral"}`, 3.75},
		{"1 hour", `{"type":"ephemeral","ttl":"1h"}`, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, spent := cacheSpendGateway(t, cachePrices, admit.Budget{Day: 10})
			system := strings.Repeat("You are a careful assistant who answers briefly. ", 200) // ~2,400 tokens
			var got []float64
			for i := range 2 {
				body := fmt.Sprintf(`{"model":"claude-x","max_tokens":64,"system":[{"type":"text","text":%q,"cache_control":%s}],`+
					`"messages":[{"role":"user","content":"question %d"}]}`, system, tt.control, i)
				before := spent()
				code, b := call(t, "POST", base+"/a/v1/messages", "ck-team", body)
				require.Equal(t, http.StatusOK, code, string(b))
				var answer struct {
					Usage struct {
						Input         int64 `json:"input_tokens"`
						Output        int64 `json:"output_tokens"`
						CacheCreation int64 `json:"cache_creation_input_tokens"`
						CacheRead     int64 `json:"cache_read_input_tokens"`
						Split         struct {
							W5m int64 `json:"ephemeral_5m_input_tokens"`
							W1h int64 `json:"ephemeral_1h_input_tokens"`
						} `json:"cache_creation"`
					} `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(b, &answer))
				u := answer.Usage
				if i == 0 {
					require.Positive(t, u.CacheCreation, "the first request writes the prefix")
					require.Zero(t, u.CacheRead)
				} else {
					require.Positive(t, u.CacheRead, "the second reads it")
					require.Zero(t, u.CacheCreation)
				}
				require.Equal(t, u.CacheCreation, u.Split.W5m+u.Split.W1h)
				want := (float64(u.Input)*3 + float64(u.Split.W5m)*3.75 + float64(u.Split.W1h)*6 +
					float64(u.CacheRead)*0.3 + float64(u.Output)*15) / 1e6
				if i == 0 {
					require.InDelta(t, float64(u.CacheCreation)*tt.write/1e6, (float64(u.Split.W5m)*3.75+float64(u.Split.W1h)*6)/1e6, 1e-12,
						"the write is at its TTL's rate")
				}
				charged := spent() - before
				require.InDelta(t, want, charged, 2e-9, "request %d: usage %+v", i, u)
				got = append(got, charged)
			}
			require.Less(t, got[1], got[0]/2, "a cache read costs a tenth of the input price, a write more than it")
		})
	}
}

// TestBudgetChargesOpenAICachedTokens: a budgeted client sends the same
// long prompt twice on one key (chat completions, then the Responses
// API): the second answer reports cached_tokens, charged at cache_read,
// the rest of the input at input.
func TestBudgetChargesOpenAICachedTokens(t *testing.T) {
	t.Parallel()
	doc := strings.Repeat("lorem ipsum dolor sit amet ", 300) // ~2,000 tokens
	tests := []struct {
		name, path, body string
		read             func(b []byte) (input, cached, output int64)
	}{
		{"chat completions", "/o/v1/chat/completions",
			`{"model":"gpt-x","max_completion_tokens":64,"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}]}`,
			func(b []byte) (int64, int64, int64) {
				var a struct {
					Usage struct {
						Prompt     int64 `json:"prompt_tokens"`
						Completion int64 `json:"completion_tokens"`
						Details    struct {
							Cached int64 `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(b, &a))
				return a.Usage.Prompt, a.Usage.Details.Cached, a.Usage.Completion
			}},
		{"responses", "/o/v1/responses",
			`{"model":"gpt-x","max_output_tokens":64,"instructions":%q,"input":"question %d"}`,
			func(b []byte) (int64, int64, int64) {
				var a struct {
					Usage struct {
						Input   int64 `json:"input_tokens"`
						Output  int64 `json:"output_tokens"`
						Details struct {
							Cached int64 `json:"cached_tokens"`
						} `json:"input_tokens_details"`
					} `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(b, &a))
				return a.Usage.Input, a.Usage.Details.Cached, a.Usage.Output
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, spent := cacheSpendGateway(t, cachePrices, admit.Budget{Day: 10})
			for i := range 2 {
				before := spent()
				code, b := call(t, "POST", base+tt.path, "ck-team", fmt.Sprintf(tt.body, doc, i))
				require.Equal(t, http.StatusOK, code, string(b))
				in, cached, out := tt.read(b)
				if i == 1 {
					require.Positive(t, cached, "the second request reads the prompt from the cache")
				}
				want := (float64(in-cached)*2 + float64(cached)*0.5 + float64(out)*8) / 1e6
				require.InDelta(t, want, spent()-before, 2e-9, "request %d: input %d, cached %d, output %d", i, in, cached, out)
			}
		})
	}
}

// TestBudgetHoldsOneHourWritesAtTheirPrice: the worst case held for a
// request with a 1-hour breakpoint prices the prefix up to it at
// cache_write_1h. At a price where a 1-hour write costs eight times a
// 5-minute one, a budget above the 5-minute hold but below what the write
// costs refuses the request (the hold alone exceeds it) instead of
// admitting it to overspend; a budget that holds it is charged the write
// at its price, within the hold.
func TestBudgetHoldsOneHourWritesAtTheirPrice(t *testing.T) {
	t.Parallel()
	prices := pricing.Config{Models: map[string]pricing.Price{"claude-x": {Input: 3, Output: 1, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 30}}}
	system := strings.Repeat("You are a careful assistant who answers briefly. ", 200) // ~2,400 tokens
	body := fmt.Sprintf(`{"model":"claude-x","max_tokens":16,"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral","ttl":"1h"}}],`+
		`"messages":[{"role":"user","content":"hi"}]}`, system)
	c, err := provider.Estimate(llm.Anthropic, []byte(body))
	require.NoError(t, err)
	hold5m := (float64(c.InputTokens)*3.75 + 16*1) / 1e6 // what the hold was before 1-hour writes were priced apart
	prefix := float64(len(system)) / 4                   // the mock's count of the written prefix
	require.Greater(t, prefix*30/1e6, 2*hold5m, "the write alone costs more than twice the 5-minute hold")

	base, spent := cacheSpendGateway(t, prices, admit.Budget{Day: 2 * hold5m})
	code, b := call(t, "POST", base+"/a/v1/messages", "ck-team", body)
	require.Equal(t, http.StatusBadRequest, code, "held at the 1-hour price, the request is larger than the budget: %s", b)
	require.Contains(t, requireProviderError(t, llm.Anthropic, b, "invalid_request_error"), "budget")
	require.Zero(t, spent())

	base, spent = cacheSpendGateway(t, prices, admit.Budget{Day: 1})
	code, b = call(t, "POST", base+"/a/v1/messages", "ck-team", body)
	require.Equal(t, http.StatusOK, code, string(b))
	var answer struct {
		Usage struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
			Split  struct {
				W1h int64 `json:"ephemeral_1h_input_tokens"`
			} `json:"cache_creation"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(b, &answer))
	u := answer.Usage
	require.Positive(t, u.Split.W1h)
	require.InDelta(t, (float64(u.Input)*3+float64(u.Split.W1h)*30+float64(u.Output)*1)/1e6, spent(), 2e-9)
	require.LessOrEqual(t, spent(), (float64(c.InputTokens)*30+16)/1e6, "the charge is within the hold")
}

// TestBudgetChargesABackgroundResponseItsWorstCase: a background Response
// is answered queued, before it has usage, so a budgeted client is
// charged its worst case (its input estimate and all of
// max_output_tokens), priced here from the estimate; the same request in
// the foreground is charged its usage, less.
func TestBudgetChargesABackgroundResponseItsWorstCase(t *testing.T) {
	t.Parallel()
	base, spent := cacheSpendGateway(t, cachePrices, admit.Budget{Day: 10})
	const body = `{"model":"gpt-x","max_output_tokens":200,"background":true,"input":"think about it in the background"}`
	c, err := provider.EstimateFor(llm.OpenAI, provider.EndpointResponses, []byte(body), nil)
	require.NoError(t, err)
	worst := (float64(c.InputTokens)*2 + 200*8) / 1e6 // gpt-x: input 2 (its cache_write), output 8
	code, b := call(t, "POST", base+"/o/v1/responses", "ck-team", body)
	require.Equal(t, http.StatusOK, code, string(b))
	var answer struct {
		Status     string `json:"status"`
		Background bool   `json:"background"`
		Usage      any    `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(b, &answer))
	require.Equal(t, "queued", answer.Status)
	require.True(t, answer.Background)
	require.Nil(t, answer.Usage, "no usage yet")
	require.InDelta(t, worst, spent(), 2e-9, "charged its worst case")

	fg := strings.Replace(body, `"background":true,`, "", 1)
	code, b = call(t, "POST", base+"/o/v1/responses", "ck-team", fg)
	require.Equal(t, http.StatusOK, code, string(b))
	charged := spent() - worst
	require.Positive(t, charged)
	require.Less(t, charged, worst, "the foreground one is charged its usage (the mock writes 40 to 64 of the 200 output tokens)")
}
