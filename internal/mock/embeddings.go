package mock

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
)

// POST /v1/embeddings: one deterministic unit vector per input (seeded by
// the model and the input), as float arrays or base64 little-endian
// float32, usage {prompt_tokens, total_tokens}. It takes 1 request and its
// input tokens from the key's OpenAI RPM and TPM buckets, nothing for
// output, and is not cached.

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

// embeddingVector is input's vector: dims normal draws, normalized (so a
// shortened vector is renormalized, as text-embedding-3 models do).
func embeddingVector(seed uint64, model, input string, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(model))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(input))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		v[i] = rng.NormFloat64()
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i := range v {
		out[i] = float32(v[i] / norm)
	}
	return out
}

func encodeEmbedding(v []float32, b64 bool) any {
	if !b64 {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return f
	}
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseEmbeddings(body)
	if aerr != nil {
		x.rl = s.quotas.peekHeaders(scopeOpenAI, x.key, x.now)
		x.fail(aerr, nil)
		return
	}
	f := s.faults.decide(x.now)
	if f.kind != faultNone {
		x.rl = s.quotas.peekHeaders(scopeOpenAI, x.key, x.now)
		x.sendFault(f)
		return
	}
	if _, ok := x.admitOpenAI(req.request, false); !ok {
		return
	}
	t := s.stats.admit(x.key, x.now, admitted{endpoint: EndpointEmbeddings})
	defer t.finish(Counts{Requests: 1, InputTokens: req.inputTokens, Tokens: req.inputTokens})
	if !x.sleep(s.cfg.TTFT + f.slow) {
		s.stats.status(x.key, 499)
		return
	}
	out := embeddingList{Object: "list", Model: req.model, Data: make([]embeddingData, len(req.inputs)),
		Usage: embeddingUsage{PromptTokens: req.inputTokens, TotalTokens: req.inputTokens}}
	for i, in := range req.inputs {
		v := embeddingVector(s.cfg.Seed, req.model, in.seed, req.dimensions)
		out.Data[i] = embeddingData{Object: "embedding", Index: i, Embedding: encodeEmbedding(v, req.base64)}
	}
	x.commonHeaders("application/json")
	writeJSON(w, http.StatusOK, out)
	s.stats.status(x.key, http.StatusOK)
}
