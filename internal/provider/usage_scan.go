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
	uCacheSplit
	uOutputDetails
	uCompletionDetails
	uServiceTier
	uFields
)

var usageNames = [uFields]string{
	"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
	"prompt_tokens", "completion_tokens", "prompt_tokens_details", "input_tokens_details",
	"cache_creation", "output_tokens_details", "completion_tokens_details", "service_tier",
}

// scanUsageDoc finds the top-level "usage" (and "service_tier") members of
// a JSON document and reads them: found is false when there is no usage
// (or it is null).
func scanUsageDoc(p llm.Protocol, body []byte) (u llm.Usage, found, ok bool) {
	s := scan{b: body}
	if !s.open('{') {
		return llm.Usage{}, false, false
	}
	var usage, tier span
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
		var dst *span
		switch {
		case string(key) == "usage":
			dst = &usage
		case string(key) == "service_tier":
			dst = &tier
		case foldsTo(key, "usage", "service_tier"):
			return llm.Usage{}, false, false
		}
		if dst != nil {
			if dst.end != 0 {
				return llm.Usage{}, false, false // a duplicate: the last one wins there
			}
			*dst = v
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return llm.Usage{}, false, false
	}
	if usage.end == 0 {
		return llm.Usage{}, false, true
	}
	u, found, ok = scanUsageObject(p, body[usage.start:usage.end])
	if ok && found && u.ServiceTier == "" && tier.end != 0 {
		u.ServiceTier, ok = lenientString(body[tier.start:tier.end])
	}
	return u, found, ok
}

// lenientString reads a value as lenient[string] does: a plain string
// literal is its contents, any other literal but a string is "". A string
// with escapes or non-ASCII bytes is left to the reference (ok false).
func lenientString(b []byte) (string, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", true
	}
	s := scan{b: b}
	v, plain, ok := s.lit()
	if !ok || !plain || v.end != len(b) {
		return "", false
	}
	return string(b[1 : len(b)-1]), true
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
	var c usageCounts
	var vals [uFields]int64
	var set [uFields]bool
	ptr := func(i int) *int64 {
		if !set[i] {
			return nil
		}
		return &vals[i]
	}
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
		switch f {
		case uPromptDetails, uInputDetails:
			d, present, ok := s.details("cached_tokens", "")
			if !ok {
				return llm.Usage{}, false, false
			}
			if f == uPromptDetails {
				c.hasPromptDetails, c.promptCached = present, d[0]
			} else {
				c.hasInputDetails, c.inputCached = present, d[0]
			}
		case uCacheSplit:
			d, _, ok := s.details("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")
			if !ok {
				return llm.Usage{}, false, false
			}
			c.split5m, c.split1h = d[0], d[1]
		case uOutputDetails:
			d, _, ok := s.details("reasoning_tokens", "thinking_tokens")
			if !ok {
				return llm.Usage{}, false, false
			}
			c.reasoning, c.thinking = d[0], d[1]
		case uCompletionDetails:
			d, _, ok := s.details("reasoning_tokens", "")
			if !ok {
				return llm.Usage{}, false, false
			}
			c.compReasons = d[0]
		case uServiceTier:
			v, ok := s.skip()
			if !ok {
				return llm.Usage{}, false, false
			}
			if c.tier, ok = lenientString(b[v.start:v.end]); !ok {
				return llm.Usage{}, false, false
			}
		default:
			var present bool
			if vals[f], present, ok = s.integer(); !ok {
				return llm.Usage{}, false, false
			}
			set[f] = present
		}
	}
	c.input, c.output = ptr(uInput), ptr(uOutput)
	c.cacheCreation, c.cacheRead = ptr(uCacheCreation), ptr(uCacheRead)
	c.prompt, c.completion = ptr(uPrompt), ptr(uCompletion)
	u, found := c.usage(p)
	return u, found, true
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

// details reads a *_details object's counts named a and b ("" for none):
// each is nil when absent or null. present is false for a null object.
// Anything but an object of integers and nulls under those names is left
// to the reference.
func (s *scan) details(a, b string) (vals [2]*int64, present, ok bool) {
	if s.null() {
		return vals, false, true
	}
	if !s.open('{') {
		return vals, false, false
	}
	names := [2]string{a, b}
	var seen [2]bool
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return vals, false, false
		}
		if done {
			return vals, true, true
		}
		f := -1
		for i, n := range names {
			if n != "" && string(key) == n {
				f = i
			}
		}
		if f < 0 {
			if (a != "" && foldsTo(key, a)) || (b != "" && foldsTo(key, b)) {
				return vals, false, false
			}
			if _, ok := s.skip(); !ok {
				return vals, false, false
			}
			continue
		}
		if seen[f] {
			return vals, false, false
		}
		seen[f] = true
		v, has, ok := s.integer()
		if !ok {
			return vals, false, false
		}
		if has {
			vals[f] = &v
		}
	}
}

// scanOpenAIChunk reads what the stream observer needs from an OpenAI
// chunk: whether it has choices, its error (span, when not null) and its
// usage (with the chunk's service_tier). ok is false when the reference
// must decide.
func scanOpenAIChunk(data []byte) (choices bool, errSpan span, u llm.Usage, hasUsage, ok bool) {
	s := scan{b: data}
	if !s.open('{') {
		return false, span{}, llm.Usage{}, false, false
	}
	var seen [4]bool
	var usage, tier span
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
		case "service_tier":
			f = 3
		default:
			if foldsTo(key, "choices", "usage", "error", "service_tier") {
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
		case 3:
			tier = v
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
	if ok && hasUsage && u.ServiceTier == "" && tier.end != 0 {
		u.ServiceTier, ok = lenientString(data[tier.start:tier.end])
	}
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
