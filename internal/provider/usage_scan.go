package provider

import (
	"github.com/sluicehq/sluice/internal/llm"
)

// The usage scanner: ParseUsage's and the OpenAI stream observer's fast
// path. It walks a response document with the estimate's strict scanner,
// skipping every value but the few it reads, so a large completion is
// looked at once and nothing is decoded but the usage's integers. Like
// scanEstimate, it answers only when it is sure to agree with the
// encoding/json reference (usageFrom on the decoded document); on anything
// else (an escaped or case-folded key, a duplicate, a count that is not a
// plain integer, a document the scanner refuses) ok is false and the
// caller runs the reference.

// Usage fields, in the order of wireUsage.
const (
	uInput = iota
	uOutput
	uCacheCreation
	uCacheRead
	uPrompt
	uCompletion
	uPromptDetails
	uInputDetails
	uFields
)

var usageNames = [uFields]string{
	"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
	"prompt_tokens", "completion_tokens", "prompt_tokens_details", "input_tokens_details",
}

// scanUsageDoc finds the top-level "usage" member of a JSON document and
// reads it: found is false when there is none (or it is null).
func scanUsageDoc(p llm.Protocol, body []byte) (u llm.Usage, found, ok bool) {
	s := scan{b: body}
	if !s.open('{') {
		return llm.Usage{}, false, false
	}
	var usage span
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return llm.Usage{}, false, false
		}
		if done {
			break
		}
		v, ok := s.skip()
		if !ok {
			return llm.Usage{}, false, false
		}
		switch {
		case string(key) == "usage":
			if usage.end != 0 {
				return llm.Usage{}, false, false // a duplicate: the last one wins there
			}
			usage = v
		case foldsTo(key, "usage"):
			return llm.Usage{}, false, false
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return llm.Usage{}, false, false
	}
	if usage.end == 0 {
		return llm.Usage{}, false, true
	}
	return scanUsageObject(p, body[usage.start:usage.end])
}

// scanUsageObject reads a usage object's counts as usageFrom does.
func scanUsageObject(p llm.Protocol, b []byte) (llm.Usage, bool, bool) {
	s := scan{b: b}
	if s.null() {
		return llm.Usage{}, false, true
	}
	if !s.open('{') {
		return llm.Usage{}, false, false
	}
	var vals [uFields]int64
	var set [uFields]bool
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return llm.Usage{}, false, false
		}
		if done {
			break
		}
		f := -1
		for i, name := range usageNames {
			if string(key) == name {
				f = i
				break
			}
		}
		if f < 0 {
			if foldsTo(key, usageNames[:]...) {
				return llm.Usage{}, false, false
			}
			if _, ok := s.skip(); !ok {
				return llm.Usage{}, false, false
			}
			continue
		}
		if set[f] {
			return llm.Usage{}, false, false
		}
		set[f] = true
		var v int64
		var present bool
		if f == uPromptDetails || f == uInputDetails {
			v, present, ok = s.cachedTokens()
		} else {
			v, present, ok = s.integer()
		}
		if !ok {
			return llm.Usage{}, false, false
		}
		vals[f], set[f] = v, present
	}
	var w wireUsage
	ptr := func(i int) *int64 {
		if !set[i] {
			return nil
		}
		return &vals[i]
	}
	w.InputTokens, w.OutputTokens = ptr(uInput), ptr(uOutput)
	w.CacheCreationInputTokens, w.CacheReadInputTokens = ptr(uCacheCreation), ptr(uCacheRead)
	w.PromptTokens, w.CompletionTokens = ptr(uPrompt), ptr(uCompletion)
	var pd, id struct {
		CachedTokens *int64 `json:"cached_tokens"`
	}
	if set[uPromptDetails] {
		pd.CachedTokens = cachedPtr(vals[uPromptDetails])
		w.PromptTokensDetails = &pd
	}
	if set[uInputDetails] {
		id.CachedTokens = cachedPtr(vals[uInputDetails])
		w.InputTokensDetails = &id
	}
	u, found := w.usage(p)
	return u, found, true
}

// noCachedTokens stands for a details object without cached_tokens.
const noCachedTokens = -1 << 62

func cachedPtr(v int64) *int64 {
	if v == noCachedTokens {
		return nil
	}
	return &v
}

// integer reads a count: an integer literal (present) or null (absent).
// Anything else is left to the reference.
func (s *scan) integer() (v int64, present, ok bool) {
	if s.null() {
		return 0, false, true
	}
	s.ws()
	sp, ok := s.skip()
	if !ok {
		return 0, false, false
	}
	b := s.b[sp.start:sp.end]
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true, true
}

// cachedTokens reads a *_tokens_details object's cached_tokens: present
// when the object is (v is noCachedTokens when the count is absent).
func (s *scan) cachedTokens() (v int64, present, ok bool) {
	if s.null() {
		return 0, false, true
	}
	if !s.open('{') {
		return 0, false, false
	}
	v = noCachedTokens
	seen := false
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return 0, false, false
		}
		if done {
			return v, true, true
		}
		switch {
		case string(key) == "cached_tokens":
			if seen {
				return 0, false, false
			}
			seen = true
			n, has, ok := s.integer()
			if !ok {
				return 0, false, false
			}
			if has {
				v = n
			}
		case foldsTo(key, "cached_tokens"):
			return 0, false, false
		default:
			if _, ok := s.skip(); !ok {
				return 0, false, false
			}
		}
	}
}

// scanOpenAIChunk reads what the stream observer needs from an OpenAI
// chunk: whether it has choices, its error (span, when not null) and its
// usage. ok is false when the reference must decide.
func scanOpenAIChunk(data []byte) (choices bool, errSpan span, u llm.Usage, hasUsage, ok bool) {
	s := scan{b: data}
	if !s.open('{') {
		return false, span{}, llm.Usage{}, false, false
	}
	var seen [3]bool
	var usage span
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return false, span{}, llm.Usage{}, false, false
		}
		if done {
			break
		}
		f := -1
		switch string(key) {
		case "choices":
			f = 0
		case "usage":
			f = 1
		case "error":
			f = 2
		default:
			if foldsTo(key, "choices", "usage", "error") {
				return false, span{}, llm.Usage{}, false, false
			}
		}
		if f >= 0 {
			if seen[f] {
				return false, span{}, llm.Usage{}, false, false
			}
			seen[f] = true
		}
		if f == 0 {
			n, ok := s.objectElements()
			if !ok {
				return false, span{}, llm.Usage{}, false, false
			}
			choices = n > 0
			continue
		}
		v, ok := s.skip()
		if !ok {
			return false, span{}, llm.Usage{}, false, false
		}
		switch f {
		case 1:
			usage = v
		case 2:
			if string(data[v.start:v.end]) != "null" {
				errSpan = v
			}
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return false, span{}, llm.Usage{}, false, false
	}
	if errSpan.end != 0 || usage.end == 0 {
		return choices, errSpan, llm.Usage{}, false, true
	}
	u, hasUsage, ok = scanUsageObject(llm.OpenAI, data[usage.start:usage.end])
	return choices, errSpan, u, hasUsage, ok
}

// objectElements scans a null or an array of objects and nulls (what
// encoding/json decodes into a []struct{}) and counts its elements.
func (s *scan) objectElements() (int, bool) {
	if s.null() {
		return 0, true
	}
	if !s.open('[') {
		return 0, false
	}
	for k := 0; ; k++ {
		done, ok := s.element(k)
		if !ok {
			return 0, false
		}
		if done {
			return k, true
		}
		s.ws()
		if s.i >= len(s.b) || (s.b[s.i] != '{' && s.b[s.i] != 'n') {
			return 0, false
		}
		if _, ok := s.skip(); !ok {
			return 0, false
		}
	}
}
