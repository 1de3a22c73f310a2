package provider

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON scanner under scanEstimate: strict (it accepts nothing that
// encoding/json rejects; what it cannot be sure of, it refuses) and
// allocation-free. It walks s.b from s.i.

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// open consumes c ('{' or '[') after whitespace.
func (s *scan) open(c byte) bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != c {
		return false
	}
	s.i++
	s.depth++
	return s.depth <= scanMaxDepth
}

// null consumes a null literal after whitespace, if there is one.
func (s *scan) null() bool {
	s.ws()
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// member moves to the k-th member of an object: its key (the literal's
// contents; plain when it has no escapes or non-ASCII bytes) with the
// colon consumed, or done at the closing brace.
func (s *scan) member(k int) (key []byte, plain, done, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, false, false, false
	}
	if s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil, false, true, true
	}
	if k > 0 {
		if s.b[s.i] != ',' {
			return nil, false, false, false
		}
		s.i++
		s.ws()
	}
	v, plain, ok := s.lit()
	if !ok {
		return nil, false, false, false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false, false, false
	}
	s.i++
	return s.b[v.start+1 : v.end-1], plain, false, true
}

// element moves to the k-th element of an array, or done at the closing
// bracket.
func (s *scan) element(k int) (done, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	if s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true, true
	}
	if k > 0 {
		if s.b[s.i] != ',' {
			return false, false
		}
		s.i++
	}
	return false, true
}

// litQuiet marks the bytes a string literal's scan passes over without a
// second look: printable ASCII other than the quote and the backslash.
var litQuiet = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// lit scans a string literal after whitespace. The literal's end is
// remembered when it is plain, so text need not look at it again.
func (s *scan) lit() (v span, plain, ok bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return span{}, false, false
	}
	start := s.i
	plain = true
	b := s.b
	for i := s.i + 1; i < len(b); {
		for i < len(b) && litQuiet[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			if plain {
				s.plainEnd = i + 1
			}
			return span{start, i + 1}, plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return span{}, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if getu4(b[i:]) < 0 {
					return span{}, false, false
				}
				i += 6
			default:
				return span{}, false, false
			}
		case c < 0x20:
			return span{}, false, false
		default:
			plain = false
			i++
		}
	}
	return span{}, false, false
}

// stringOrNull scans a string or null value; a null is the absent span.
func (s *scan) stringOrNull() (span, bool) {
	if s.null() {
		return span{}, true
	}
	v, _, ok := s.lit()
	return v, ok
}

// skip scans any value after whitespace and returns its span.
func (s *scan) skip() (span, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return span{}, false
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '"':
		v, _, ok := s.lit()
		return v, ok
	case c == '{':
		s.open('{')
		if s.depth > scanMaxDepth {
			return span{}, false
		}
		for k := 0; ; k++ {
			_, _, done, ok := s.member(k)
			if !ok {
				return span{}, false
			}
			if done {
				return span{start, s.i}, true
			}
			if _, ok := s.skip(); !ok {
				return span{}, false
			}
		}
	case c == '[':
		s.open('[')
		if s.depth > scanMaxDepth {
			return span{}, false
		}
		for k := 0; ; k++ {
			done, ok := s.element(k)
			if !ok {
				return span{}, false
			}
			if done {
				return span{start, s.i}, true
			}
			if _, ok := s.skip(); !ok {
				return span{}, false
			}
		}
	case c == 't' || c == 'f' || c == 'n':
		for _, word := range [...]string{"true", "false", "null"} {
			if s.i+len(word) <= len(s.b) && string(s.b[s.i:s.i+len(word)]) == word {
				s.i += len(word)
				return span{start, s.i}, true
			}
		}
		return span{}, false
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	}
	return span{}, false
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scan) number() (span, bool) {
	b, i, start := s.b, s.i, s.i
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return span{}, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return span{}, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return span{}, false
		}
	}
	s.i = i
	return span{start, i}, true
}

// unquotedLen is the length of a string literal's contents once decoded as
// encoding/json decodes them: escapes resolved, invalid UTF-8 and unpaired
// surrogates replaced by U+FFFD.
func unquotedLen(s []byte) int {
	n := 0
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			if s[r+1] != 'u' {
				n++
				r += 2
				continue
			}
			rr := getu4(s[r:])
			r += 6
			if utf16.IsSurrogate(rr) {
				if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
					r += 6
					n += utf8.RuneLen(dec)
					continue
				}
				rr = unicode.ReplacementChar
			}
			n += utf8.RuneLen(rr)
		case c < utf8.RuneSelf:
			n++
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			n += utf8.RuneLen(rr)
		}
	}
	return n
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// foldsTo reports whether key matches one of names only
// case-insensitively, as encoding/json would match it to a struct field.
// Keys are ASCII here (others are not plain).
func foldsTo(key []byte, names ...string) bool {
	for _, name := range names {
		if len(key) != len(name) {
			continue
		}
		match := true
		for i := range key {
			a, b := key[i], name[i]
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if a != b {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
