package scenario

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// Mix is the share of requests per priority class, critical first. Shares
// need not sum to 1: they are normalized.
type Mix [llm.NumPriorities]float64

// MixDefault is the demo's and the priority scenario's mix: 10% critical,
// 20% high, 50% normal, 20% low.
var MixDefault = Mix{0.10, 0.20, 0.50, 0.20}

// Workload defaults.
const (
	// RequestsDefault is the number of requests of a workload.
	RequestsDefault = 1000
	// InputTokensMinDefault and InputTokensMaxDefault bound the prompt size.
	InputTokensMinDefault = 400
	InputTokensMaxDefault = 600
	// MaxTokensDefault is each request's max_tokens.
	MaxTokensDefault = 200
	// AnthropicModelDefault and OpenAIModelDefault are the models named in
	// request bodies (the prices in Prices are theirs).
	AnthropicModelDefault = "claude-sonnet-4-5"
	OpenAIModelDefault    = "gpt-4.1"
)

// Workload describes a reproducible list of requests.
type Workload struct {
	// Requests is how many requests to generate. Defaults to
	// RequestsDefault.
	Requests int
	// Mix is the share of each priority class. Defaults to MixDefault.
	Mix Mix
	// InputTokensMin and InputTokensMax bound each prompt's size in tokens
	// (4 bytes of text per token, as the mock counts), drawn uniformly
	// unless InputTokensStdDev is set. Default to InputTokensMinDefault and
	// InputTokensMaxDefault.
	InputTokensMin int
	InputTokensMax int
	// InputTokensStdDev, when positive, draws each prompt's size from a
	// normal distribution with this standard deviation around the middle
	// of [InputTokensMin, InputTokensMax], rounded and clamped to it.
	// Defaults to 0 (uniform).
	InputTokensStdDev float64
	// MaxTokens is each request's max_tokens. Defaults to MaxTokensDefault.
	MaxTokens int
	// StreamShare is the share of requests that stream, in [0, 1].
	// Defaults to 0.
	StreamShare float64
	// OpenAIShare is the share of requests sent in the OpenAI protocol, in
	// [0, 1]. Defaults to 0.
	OpenAIShare float64
	// Rate is the mean arrival rate in requests per second of a Poisson
	// process; 0 means every request arrives at once. Defaults to 0.
	Rate float64
	// Seed makes the workload reproducible. Defaults to 0.
	Seed uint64
}

// WithDefaults returns w with every zero field set to its default.
func (w Workload) WithDefaults() Workload {
	w.Requests = cmp.Or(w.Requests, RequestsDefault)
	if w.Mix == (Mix{}) {
		w.Mix = MixDefault
	}
	w.InputTokensMin = cmp.Or(w.InputTokensMin, InputTokensMinDefault)
	w.InputTokensMax = cmp.Or(w.InputTokensMax, max(InputTokensMaxDefault, w.InputTokensMin))
	w.MaxTokens = cmp.Or(w.MaxTokens, MaxTokensDefault)
	return w
}

func (w Workload) validate() error {
	var errs []error
	if w.Requests < 1 {
		errs = append(errs, fmt.Errorf("Requests must be >= 1, got %d", w.Requests))
	}
	var sum float64
	for i, s := range w.Mix {
		if !(s >= 0) || math.IsInf(s, 0) {
			errs = append(errs, fmt.Errorf("Mix[%s] must be >= 0, got %v", llm.Priority(i), s))
		}
		sum += s
	}
	if !(sum > 0) {
		errs = append(errs, errors.New("Mix must have a positive share"))
	}
	if w.InputTokensMin < 1 || w.InputTokensMax < w.InputTokensMin {
		errs = append(errs, fmt.Errorf("InputTokensMin (%d) must be >= 1 and <= InputTokensMax (%d)", w.InputTokensMin, w.InputTokensMax))
	}
	if !(w.InputTokensStdDev >= 0) || math.IsInf(w.InputTokensStdDev, 0) {
		errs = append(errs, fmt.Errorf("InputTokensStdDev must be >= 0, got %v", w.InputTokensStdDev))
	}
	if w.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("MaxTokens must be >= 1, got %d", w.MaxTokens))
	}
	for name, p := range map[string]float64{"StreamShare": w.StreamShare, "OpenAIShare": w.OpenAIShare} {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s must be in [0, 1], got %v", name, p))
		}
	}
	if !(w.Rate >= 0) || math.IsInf(w.Rate, 0) {
		errs = append(errs, fmt.Errorf("Rate must be >= 0, got %v", w.Rate))
	}
	return errors.Join(errs...)
}

// Item is one request of a workload.
type Item struct {
	// Index is the request's position in the workload.
	Index int
	// At is the arrival time from the start of the run.
	At time.Duration
	// Priority is the class sent as X-Priority.
	Priority llm.Priority
	// Protocol is the wire protocol (and so the upstream) used.
	Protocol llm.Protocol
	// Stream asks for a streamed reply.
	Stream bool
	// InputTokens is the prompt size (4 bytes of text per token).
	InputTokens int
	// MaxTokens is the request's max_tokens.
	MaxTokens int
	// OutputTokens, when positive, is sent as mock.HeaderOutputTokens so
	// the mock's reply is exactly this long (capped at MaxTokens); 0 lets
	// the mock draw the length.
	OutputTokens int
	// Group is the client the request belongs to when a scenario runs
	// several (a replayed trace's service, the batch); 0 otherwise.
	Group int
	// Seed makes the prompt text unique to the request.
	Seed uint64
}

// Generate returns the workload's requests in arrival order. Class counts
// follow Mix exactly (largest remainder), and so do the streaming and
// OpenAI counts; which request gets which is shuffled with Seed.
func Generate(w Workload) ([]Item, error) {
	w = w.WithDefaults()
	if err := w.validate(); err != nil {
		return nil, fmt.Errorf("generating workload: %w", err)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0xbe9c4))
	n := w.Requests
	classes := classCounts(w.Mix, n)
	items := make([]Item, 0, n)
	for c, k := range classes {
		for range k {
			items = append(items, Item{Priority: llm.Priority(c)})
		}
	}
	rng.Shuffle(n, func(i, j int) { items[i], items[j] = items[j], items[i] })
	streams := flags(rng, n, int(math.Round(w.StreamShare*float64(n))))
	openai := flags(rng, n, int(math.Round(w.OpenAIShare*float64(n))))
	var at float64
	for i := range items {
		it := &items[i]
		it.Index = i
		if w.Rate > 0 && i > 0 {
			at += rng.ExpFloat64() / w.Rate
		}
		it.At = time.Duration(at * float64(time.Second))
		it.Protocol = llm.Anthropic
		if openai[i] {
			it.Protocol = llm.OpenAI
		}
		it.Stream = streams[i]
		it.InputTokens = w.inputTokens(rng)
		it.MaxTokens = w.MaxTokens
		it.Seed = rng.Uint64()
	}
	return items, nil
}

// inputTokens draws one prompt size.
func (w Workload) inputTokens(rng *rand.Rand) int {
	if w.InputTokensStdDev > 0 {
		mean := float64(w.InputTokensMin+w.InputTokensMax) / 2
		x := math.Round(mean + w.InputTokensStdDev*rng.NormFloat64())
		return int(math.Min(math.Max(x, float64(w.InputTokensMin)), float64(w.InputTokensMax)))
	}
	return w.InputTokensMin + rng.IntN(w.InputTokensMax-w.InputTokensMin+1)
}

// classCounts splits n by the largest-remainder method so the counts sum
// to n and each is within one of its exact share.
func classCounts(mix Mix, n int) [llm.NumPriorities]int {
	var sum float64
	for _, s := range mix {
		sum += s
	}
	var counts [llm.NumPriorities]int
	var rem [llm.NumPriorities]float64
	left := n
	for i, s := range mix {
		exact := s / sum * float64(n)
		counts[i] = int(math.Floor(exact))
		rem[i] = exact - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
	}
	return counts
}

// flags returns n booleans of which exactly k (clamped to [0, n]) are true,
// in random positions.
func flags(rng *rand.Rand, n, k int) []bool {
	out := make([]bool, n)
	for _, i := range rng.Perm(n)[:min(max(k, 0), n)] {
		out[i] = true
	}
	return out
}

// promptVocabulary is the text prompts are made of.
var promptVocabulary = strings.Fields(`summarize the quarterly report and list every risk the board
should discuss before approving the budget for next year including hiring plans vendor contracts
and the migration of customer data to the new region`)

// Prompt returns the item's prompt text: 4 × InputTokens bytes of words,
// unique to the item's Seed.
func (it Item) Prompt() string {
	size := max(it.InputTokens, 1) * 4
	rng := rand.New(rand.NewPCG(it.Seed, uint64(it.Index)))
	var b strings.Builder
	b.Grow(size + 16)
	for b.Len() < size {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(promptVocabulary[rng.IntN(len(promptVocabulary))])
	}
	return b.String()[:size]
}

// Body returns the item's JSON request body in its protocol: an Anthropic
// Messages or an OpenAI Chat Completions request.
func (it Item) Body() []byte {
	msgs := []map[string]string{{"role": "user", "content": it.Prompt()}}
	body := map[string]any{"messages": msgs}
	if it.Protocol == llm.OpenAI {
		body["model"] = OpenAIModelDefault
		body["max_completion_tokens"] = it.MaxTokens
		if it.Stream {
			body["stream"] = true
			body["stream_options"] = map[string]bool{"include_usage": true}
		}
	} else {
		body["model"] = AnthropicModelDefault
		body["max_tokens"] = it.MaxTokens
		if it.Stream {
			body["stream"] = true
		}
	}
	b, _ := json.Marshal(body) // maps of strings, ints and bools always encode
	return b
}

// Path is the provider path of the item's protocol.
func (it Item) Path() string {
	if it.Protocol == llm.OpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}
