package mock

import "time"

// A prompt is a request's input as the mock reads it: its text in the order
// the model reads it (Anthropic: tools, system, messages; OpenAI: tools,
// instructions, messages or input items), in blocks. Every input count of
// the mock comes from it: tokens = ceil(bytes/4), at least 1, where a string
// or a text block counts its characters and any other block its raw JSON
// (without its cache_control). The same body always gives the same prompt,
// so count_tokens, messages and the cache agree.

// block is one piece of a prompt: a tool, a system or content block, a
// message's string content, an input item.
type block struct {
	text string
	// ttl is the TTL of the cache_control breakpoint on this block
	// (Anthropic); 0 when it has none.
	ttl time.Duration
}

// prompt is a parsed request's input.
type prompt struct {
	// model and ns name the cache the prompt may hit: caches are per model,
	// and OpenAI's prompt_cache_key (ns) is combined with the prefix.
	model  string
	ns     string
	blocks []block
	bytes  int
}

func (p *prompt) add(text string) {
	p.blocks = append(p.blocks, block{text: text})
	p.bytes += len(text)
}

// addAll appends another prompt's blocks (a previous turn), without its
// breakpoints.
func (p *prompt) addAll(o *prompt) {
	for _, b := range o.blocks {
		p.add(b.text)
	}
}

// mark puts a breakpoint with ttl on the last block.
func (p *prompt) mark(ttl time.Duration) {
	if len(p.blocks) > 0 {
		p.blocks[len(p.blocks)-1].ttl = ttl
	}
}

// breakpoints returns the indexes of the blocks carrying a breakpoint.
func (p *prompt) breakpoints() []int {
	var out []int
	for i, b := range p.blocks {
		if b.ttl > 0 {
			out = append(out, i)
		}
	}
	return out
}

// tokens is the whole prompt's input tokens.
func (p *prompt) tokens() int64 { return max(1, tokensOf(p.bytes)) }

func tokensOf(nbytes int) int64 { return int64((nbytes + 3) / 4) }

// The prefix hash is FNV-1a 64 over the model, the namespace and the
// blocks' text with a separator after each block (so ["ab","c"] and
// ["a","bc"] differ); its state is one integer, so a running hash can be
// read at any point of the prompt.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
	blockSep         = 0x1e
)

type fnv64 uint64

func (h *fnv64) byte(c byte) {
	*h ^= fnv64(c)
	*h *= fnv64(fnvPrime)
}

func (h *fnv64) string(s string) {
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
}

func (p *prompt) seed() fnv64 {
	h := fnv64(fnvOffset)
	h.string(p.model)
	h.byte(0)
	h.string(p.ns)
	h.byte(0)
	return h
}

// prefix is a leading part of a prompt: its hash and length.
type prefix struct {
	hash  uint64
	bytes int
}

func (x prefix) tokens() int64 { return tokensOf(x.bytes) }

// blockPrefixes returns, for every block i, the prefix that ends with it.
func (p *prompt) blockPrefixes() []prefix {
	out := make([]prefix, len(p.blocks))
	h, n := p.seed(), 0
	for i, b := range p.blocks {
		h.string(b.text)
		h.byte(blockSep)
		n += len(b.text)
		out[i] = prefix{uint64(h), n}
	}
	return out
}

// chunkPrefixes returns the prefixes of first bytes and then every step
// bytes after it that fit in the prompt (OpenAI: 1024 tokens, then every
// 128). Blocks may be cut anywhere.
func (p *prompt) chunkPrefixes(first, step int) []prefix {
	var out []prefix
	next := first
	h, n := p.seed(), 0
	for _, b := range p.blocks {
		s := b.text
		for len(s) > 0 {
			take := min(len(s), next-n)
			h.string(s[:take])
			n += take
			s = s[take:]
			if n == next {
				out = append(out, prefix{uint64(h), n})
				next += step
			}
		}
		h.byte(blockSep)
	}
	return out
}
