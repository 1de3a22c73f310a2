package mock

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// The providers' Batch APIs (batch_anthropic.go: Message Batches;
// batch_openai.go and batch_files.go: Files and Batch). A batch's life is a
// function of the mock's clock, fixed when it is created: each line is
// decided then (its reply or its error, its usage) and finishes at its own
// instant, a deterministic share of BatchConfig.Processing after the batch
// starts; a line still unfinished when the batch is cancelled is canceled,
// and one unfinished at its expiry (BatchConfig.Window after creation) is
// expired. Batch lines take nothing from the synchronous buckets and never
// read or write the prompt cache; each succeeded line is billed once, at
// BatchConfig.Discount times the model's BatchConfig.Prices, in the key's
// batch statistics (ScopeStats.Batch).

// Batch defaults (the providers' documented limits).
const (
	// BatchProcessingDefault is how long a batch takes to process its
	// lines ("most batches completing within 1 hour"; the mock is quicker).
	BatchProcessingDefault = 2 * time.Minute
	// BatchWindowDefault is the completion window after which a batch's
	// unfinished lines expire (24 h on both providers).
	BatchWindowDefault = 24 * time.Hour
	// BatchDiscountDefault is the batch price as a share of the standard
	// price (50 %).
	BatchDiscountDefault = 0.5
	// AnthropicBatchMaxRequests and AnthropicBatchMaxBytes bound one
	// Message Batch (100,000 requests or 256 MB).
	AnthropicBatchMaxRequests       = 100_000
	AnthropicBatchMaxBytes    int64 = 256 << 20
	// OpenAIBatchMaxRequests and OpenAIBatchMaxBytes bound one OpenAI
	// batch's input file (50,000 requests, 200 MB).
	OpenAIBatchMaxRequests       = 50_000
	OpenAIBatchMaxBytes    int64 = 200 << 20
)

// BatchConfig simulates the Batch APIs. The zero value is usable: batches
// take BatchProcessingDefault, nothing fails, no queue limit.
type BatchConfig struct {
	// Processing is how long a batch takes: each line finishes at a
	// deterministic instant in (0, Processing] after the batch starts (so
	// results come in an order unrelated to the input's). Defaults to
	// BatchProcessingDefault.
	Processing time.Duration `yaml:"processing"`
	// Validation is how long an OpenAI batch stays "validating" before it
	// starts (or fails its validation). Defaults to 0.
	Validation time.Duration `yaml:"validation"`
	// Finalizing is how long an OpenAI batch stays "finalizing" after its
	// last line. Defaults to 0.
	Finalizing time.Duration `yaml:"finalizing"`
	// CancelDelay is how long a cancelled batch stays "canceling"
	// (Anthropic) or "cancelling" (OpenAI) before it ends. Defaults to 0.
	CancelDelay time.Duration `yaml:"cancel_delay"`
	// Window is the completion window: lines unfinished this long after
	// creation expire, and the batch ends. Defaults to BatchWindowDefault.
	Window time.Duration `yaml:"window"`
	// ErrorRate is the share of a batch's lines (rounded to the nearest
	// line, chosen by hash) that fail with a server error. Defaults to 0.
	ErrorRate float64 `yaml:"error_rate"`
	// MaxRequests bounds the lines of one batch. Defaults to the
	// provider's: AnthropicBatchMaxRequests, OpenAIBatchMaxRequests.
	MaxRequests int `yaml:"max_requests"`
	// MaxBytes bounds a batch create body (Anthropic) or a batch input
	// file (OpenAI). Defaults to AnthropicBatchMaxBytes, OpenAIBatchMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// QueueRequests is Anthropic's "maximum batch requests in processing
	// queue" per key: a create that would hold more lines in processing
	// is answered 429. 0 means unlimited. Defaults to 0.
	QueueRequests int64 `yaml:"queue_requests"`
	// EnqueuedTokens is OpenAI's enqueued-token limit per key and model:
	// a batch whose input tokens would take the model's tokens in
	// unfinished batches over it fails with token_limit_exceeded. 0 means
	// unlimited. Defaults to 0.
	EnqueuedTokens int64 `yaml:"enqueued_tokens"`
	// Discount is the batch price as a share of Prices. Defaults to
	// BatchDiscountDefault.
	Discount float64 `yaml:"discount"`
	// Prices are the standard prices, in US dollars per million tokens,
	// by model (the longest name that prefixes a line's model applies).
	// A line of an unpriced model is billed nothing and counted in
	// BatchStats.UnpricedLines. Defaults to none.
	Prices map[string]BatchPrice `yaml:"prices"`
}

// BatchPrice is a model's standard price in US dollars per million tokens.
type BatchPrice struct {
	// Input is the price of an input token. Defaults to 0.
	Input float64 `yaml:"input"`
	// Output is the price of an output token. Defaults to 0.
	Output float64 `yaml:"output"`
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c BatchConfig) WithDefaults() BatchConfig {
	c.Processing = cmp.Or(c.Processing, BatchProcessingDefault)
	c.Window = cmp.Or(c.Window, BatchWindowDefault)
	c.Discount = cmp.Or(c.Discount, BatchDiscountDefault)
	return c
}

func (c BatchConfig) validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"batch.processing": c.Processing, "batch.validation": c.Validation,
		"batch.finalizing": c.Finalizing, "batch.cancel_delay": c.CancelDelay, "batch.window": c.Window} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %v", name, d))
		}
	}
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("batch.window must be > 0, got %v", c.Window))
	}
	if !(c.ErrorRate >= 0 && c.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("batch.error_rate must be in [0, 1], got %g", c.ErrorRate))
	}
	if c.MaxRequests < 0 || c.MaxBytes < 0 || c.QueueRequests < 0 || c.EnqueuedTokens < 0 {
		errs = append(errs, errors.New("batch.max_requests, max_bytes, queue_requests and enqueued_tokens must be >= 0 (0 = the default)"))
	}
	if !(c.Discount > 0 && c.Discount <= 1) {
		errs = append(errs, fmt.Errorf("batch.discount must be in (0, 1], got %g", c.Discount))
	}
	for m, p := range c.Prices {
		if m == "" {
			errs = append(errs, errors.New("batch.prices: a model name is empty"))
		}
		if !(p.Input >= 0 && p.Output >= 0) || math.IsInf(p.Input+p.Output, 0) {
			errs = append(errs, fmt.Errorf("batch.prices.%s: input and output must be finite and >= 0", m))
		}
	}
	return errors.Join(errs...)
}

// maxRequests and maxBytes are the per-batch bounds for proto.
func (c BatchConfig) maxRequests(proto string) int {
	if proto == protoOpenAI {
		return cmp.Or(c.MaxRequests, OpenAIBatchMaxRequests)
	}
	return cmp.Or(c.MaxRequests, AnthropicBatchMaxRequests)
}

func (c BatchConfig) maxBytes(proto string) int64 {
	if proto == protoOpenAI {
		return cmp.Or(c.MaxBytes, OpenAIBatchMaxBytes)
	}
	return cmp.Or(c.MaxBytes, AnthropicBatchMaxBytes)
}

// price is model's price: the longest priced name that prefixes it.
func (c BatchConfig) price(model string) (BatchPrice, bool) {
	best, found := "", false
	for m := range c.Prices {
		if strings.HasPrefix(model, m) && (!found || len(m) > len(best)) {
			best, found = m, true
		}
	}
	return c.Prices[best], found
}

// lineCost is what a line with in input and out output tokens costs at
// batch prices, in nano-dollars rounded up (0 and false when unpriced).
func (c BatchConfig) lineCost(model string, in, out int64) (int64, bool) {
	p, ok := c.price(model)
	if !ok {
		return 0, false
	}
	// $/MTok is 1000 nano-dollars per token; the tolerance keeps a binary
	// rounding error (0.15 × 1000 = 150.00000000000003) from adding one.
	nanos := (float64(in)*p.Input + float64(out)*p.Output) * 1000 * c.Discount
	return int64(math.Ceil(nanos - 1e-6)), true
}

// Line outcomes, named as Anthropic's result types.
const (
	lineProcessing = "processing"
	lineSucceeded  = "succeeded"
	lineErrored    = "errored"
	lineCanceled   = "canceled"
	lineExpired    = "expired"
)

// batchLine is one request of a batch, decided at creation.
type batchLine struct {
	customID  string
	requestID string
	model     string
	// doneAt is when processing the line ends (with its reply or error).
	doneAt time.Time
	// ok is whether it succeeds; body is the reply (ok) or the error
	// body, status the error's HTTP status.
	ok     bool
	status int
	body   []byte
	// in and out are the usage of a succeeded line; in is also what it
	// holds of the enqueued-token limit.
	in, out int64
}

// mockBatch is one batch of one key.
type mockBatch struct {
	id      string
	proto   string
	key     string
	created time.Time
	// start is when lines begin to be processed (after validation).
	start   time.Time
	expires time.Time
	lines   []batchLine
	// lastDone is the latest doneAt.
	lastDone time.Time
	// cancelAt is when a cancel was asked (zero for none).
	cancelAt time.Time
	// failed holds the validation errors of an OpenAI batch that failed
	// (it has no lines).
	failed []openAIBatchError
	// openai holds the OpenAI batch's own fields.
	openai *openAIBatchInfo
}

// lineState is l's outcome at now.
func (b *mockBatch) lineState(l *batchLine, now time.Time) string {
	cut := b.expires
	cutState := lineExpired
	if !b.cancelAt.IsZero() && b.cancelAt.Before(cut) {
		cut, cutState = b.cancelAt, lineCanceled
	}
	switch {
	case l.doneAt.After(cut):
		if now.Before(cut) {
			return lineProcessing
		}
		return cutState
	case now.Before(l.doneAt):
		return lineProcessing
	case l.ok:
		return lineSucceeded
	}
	return lineErrored
}

// endAt is when the batch has ended: its last line done (OpenAI: and
// finalized), its expiry, or its cancel's delay after the cancel.
func (b *mockBatch) endAt(cfg BatchConfig) time.Time {
	if len(b.failed) > 0 {
		return b.start
	}
	end := b.lastDone
	if b.proto == protoOpenAI {
		end = end.Add(cfg.Finalizing)
	}
	if b.lastDone.After(b.expires) {
		end = b.expires
	}
	if !b.cancelAt.IsZero() {
		end = minTime(end, b.cancelAt.Add(cfg.CancelDelay))
	}
	return end
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// ended reports whether the batch has ended at now.
func (b *mockBatch) ended(cfg BatchConfig, now time.Time) bool { return !now.Before(b.endAt(cfg)) }

// counts are the lines by outcome at now.
func (b *mockBatch) counts(now time.Time) map[string]int {
	c := map[string]int{}
	for i := range b.lines {
		c[b.lineState(&b.lines[i], now)]++
	}
	return c
}

// byDone returns the lines' indexes in the order they finished (the order
// results are written in).
func (b *mockBatch) byDone() []int {
	idx := make([]int, len(b.lines))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int { return b.lines[x].doneAt.Compare(b.lines[y].doneAt) })
	return idx
}

// BatchStats are a key's (or every key's) batch usage: what the provider
// billed. Only succeeded lines are billed; canceled, expired and errored
// ones cost nothing.
type BatchStats struct {
	// Batches counts the batches created.
	Batches int64 `json:"batches"`
	// Lines counts finished lines by outcome: succeeded, errored,
	// canceled, expired.
	Lines map[string]int64 `json:"lines"`
	// InputTokens and OutputTokens are the usage of the succeeded lines.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CostNanos is what the succeeded lines cost at batch prices, in
	// nano-dollars (each line rounded up); CostUSD the same in dollars.
	CostNanos int64   `json:"cost_nanos"`
	CostUSD   float64 `json:"cost_usd"`
	// UnpricedLines counts succeeded lines whose model has no price.
	UnpricedLines int64 `json:"unpriced_lines"`
}

func (s *BatchStats) addLine(state string, l *batchLine, cfg BatchConfig) {
	if s.Lines == nil {
		s.Lines = map[string]int64{}
	}
	s.Lines[state]++
	if state != lineSucceeded {
		return
	}
	s.InputTokens += l.in
	s.OutputTokens += l.out
	if c, ok := cfg.lineCost(l.model, l.in, l.out); ok {
		s.CostNanos += c
	} else {
		s.UnpricedLines++
	}
	s.CostUSD = float64(s.CostNanos) / 1e9
}

func (s *BatchStats) merge(o BatchStats) {
	s.Batches += o.Batches
	for k, v := range o.Lines {
		if s.Lines == nil {
			s.Lines = map[string]int64{}
		}
		s.Lines[k] += v
	}
	s.InputTokens += o.InputTokens
	s.OutputTokens += o.OutputTokens
	s.CostNanos += o.CostNanos
	s.UnpricedLines += o.UnpricedLines
	s.CostUSD = float64(s.CostNanos) / 1e9
}

// batchStore holds every key's batches and files.
type batchStore struct {
	mu      sync.Mutex
	batches map[string]*mockBatch // by id
	files   map[string]*mockFile  // by id
	// gone sums the billing of deleted batches, per key, so deleting a
	// batch never takes back what was billed.
	gone    map[string]*BatchStats
	created map[string]int64 // batches created per key
}

func newBatchStore() *batchStore {
	return &batchStore{batches: map[string]*mockBatch{}, files: map[string]*mockFile{},
		gone: map[string]*BatchStats{}, created: map[string]int64{}}
}

func (bs *batchStore) reset() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.batches, bs.files = map[string]*mockBatch{}, map[string]*mockFile{}
	bs.gone, bs.created = map[string]*BatchStats{}, map[string]int64{}
}

// stats returns each key's batch billing at now. bs.mu must not be held.
func (bs *batchStore) stats(cfg BatchConfig, now time.Time) map[string]BatchStats {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	out := map[string]BatchStats{}
	for k, g := range bs.gone {
		out[k] = *g
	}
	for _, b := range bs.batches {
		s := out[b.key]
		for i := range b.lines {
			if st := b.lineState(&b.lines[i], now); st != lineProcessing {
				s.addLine(st, &b.lines[i], cfg)
			}
		}
		out[b.key] = s
	}
	for k, n := range bs.created {
		s := out[k]
		s.Batches = n
		out[k] = s
	}
	return out
}

// delete removes an ended batch, keeping its billing. bs.mu must be held.
func (bs *batchStore) delete(b *mockBatch, cfg BatchConfig, now time.Time) {
	g := bs.gone[b.key]
	if g == nil {
		g = &BatchStats{}
		bs.gone[b.key] = g
	}
	for i := range b.lines {
		if st := b.lineState(&b.lines[i], now); st != lineProcessing {
			g.addLine(st, &b.lines[i], cfg)
		}
	}
	delete(bs.batches, b.id)
}

// own returns key's batch id of proto; nil when there is none (another
// key's is none too). bs.mu must be held.
func (bs *batchStore) own(key, proto, id string) *mockBatch {
	b := bs.batches[id]
	if b == nil || b.key != key || b.proto != proto {
		return nil
	}
	return b
}

// list returns key's batches of proto, newest first. bs.mu must be held.
func (bs *batchStore) list(key, proto string) []*mockBatch {
	var out []*mockBatch
	for _, b := range bs.batches {
		if b.key == key && b.proto == proto {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(x, y *mockBatch) int {
		if c := y.created.Compare(x.created); c != 0 {
			return c
		}
		return strings.Compare(y.id, x.id)
	})
	return out
}

// lineTimes gives each line its finishing instant: start plus a share of
// processing drawn from the seed and the line's custom_id and position.
func lineTimes(lines []batchLine, seed uint64, start time.Time, processing time.Duration) time.Time {
	last := start
	for i := range lines {
		u := mix(seed, bodyHash([]byte(lines[i].customID)), uint64(i))
		frac := float64(u%1_000_000+1) / 1_000_000 // (0, 1]
		lines[i].doneAt = start.Add(time.Duration(frac * float64(processing)))
		if lines[i].doneAt.After(last) {
			last = lines[i].doneAt
		}
	}
	return last
}

// failedLines picks the round(rate × n) lines that fail with a server
// error, by hash, so the share is exact and reproducible.
func failedLines(lines []batchLine, seed uint64, rate float64) map[int]bool {
	k := int(math.Round(rate * float64(len(lines))))
	if k == 0 {
		return nil
	}
	idx := make([]int, len(lines))
	hashes := make([]uint64, len(lines))
	for i := range idx {
		idx[i] = i
		hashes[i] = mix(seed^0xe77, bodyHash([]byte(lines[i].customID)), uint64(i))
	}
	slices.SortFunc(idx, func(x, y int) int { return cmp.Compare(hashes[x], hashes[y]) })
	out := make(map[int]bool, k)
	for _, i := range idx[:k] {
		out[i] = true
	}
	return out
}
