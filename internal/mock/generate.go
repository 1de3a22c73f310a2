package mock

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
)

// Replies are generated deterministically: the length and the words depend
// only on Config.Seed, the request body and the choice index. One word is
// one output token, so usage always matches the text.

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns prefix + "01" + 22 random base62 characters, the shape of
// real request and message ids (req_011CSHoEeqs5C35K2UUqR7Fy).
func newID(prefix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 24)
	b.WriteString(prefix)
	b.WriteString("01")
	for range 22 {
		b.WriteByte(base62[rand.IntN(len(base62))])
	}
	return b.String()
}

// hexID returns prefix + 48 random hex digits, the shape of OpenAI
// Responses ids (resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654).
func hexID(prefix string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(prefix) + 48)
	b.WriteString(prefix)
	for range 48 {
		b.WriteByte(hex[rand.IntN(16)])
	}
	return b.String()
}

var vocabulary = strings.Fields(`the a queue flows through sluice gates while tokens refill slowly
and every request waits its turn patiently before the provider answers with words that stream
steadily across quiet wires toward careful clients who measure limits honour retry hints and
keep their budgets balanced under load so nothing overflows`)

func mix(seed, h uint64, i uint64) uint64 {
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[0:], seed)
	binary.LittleEndian.PutUint64(buf[8:], h)
	binary.LittleEndian.PutUint64(buf[16:], i)
	f := fnv.New64a()
	_, _ = f.Write(buf[:])
	return f.Sum64()
}

// outputLength picks the reply length in [lo, hi] where hi is maxTokens
// capped by r.Max (when set) and lo is r.Min capped by hi: uniformly, or
// from N(r.Mean, r.StdDev) rounded and clamped when r.StdDev is set.
func outputLength(r OutputRange, seed, h uint64, choice int, maxTokens int64) int64 {
	hi := maxTokens
	if r.Max > 0 && r.Max < hi {
		hi = r.Max
	}
	hi = max(hi, 1)
	lo := min(max(r.Min, 1), hi)
	u := mix(seed, h, uint64(choice))
	if r.StdDev > 0 {
		mean := r.Mean
		if mean == 0 {
			mean = float64(lo+hi) / 2
		}
		x := math.Round(mean + r.StdDev*rand.New(rand.NewPCG(u, 0x6f757470)).NormFloat64())
		return int64(math.Min(math.Max(x, float64(lo)), float64(hi)))
	}
	return lo + int64(u%uint64(hi-lo+1))
}

// words returns the n output tokens of a reply: the first word bare, the
// rest with a leading space, so concatenating them gives the text.
func words(seed, h uint64, choice int, n int64) []string {
	out := make([]string, n)
	rng := rand.New(rand.NewPCG(seed^h, uint64(choice)+1))
	for i := range out {
		w := vocabulary[rng.IntN(len(vocabulary))]
		if i > 0 {
			w = " " + w
		}
		out[i] = w
	}
	return out
}
