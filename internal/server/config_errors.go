package server

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeErrorRE splits one of the strict decoder's messages: its line, and
// either the unknown field's name or the offending value's tag and text
// (the decoder shortens a long value to 7 characters and "...").
var decodeErrorRE = regexp.MustCompile("^line ([0-9]+): (?:field (\\S+) not found|cannot unmarshal (!!\\w+)(?: `([^`]*)`)?)")

// decodeError rewrites the strict decoder's error so that each message
// names the field by its YAML path and gives its line in the file: the
// decoder reads the re-encoded document (expanded), whose lines are not
// the file's (orig, the parsed file after expansion, has the same shape).
// A message it cannot place is kept as it is.
func decodeError(err error, expanded []byte, orig *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("decoding config: %w", err)
	}
	var enc yaml.Node
	if yaml.Unmarshal(expanded, &enc) != nil {
		return fmt.Errorf("decoding config: %w", err)
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		sm := decodeErrorRE.FindStringSubmatch(m)
		if sm == nil {
			continue
		}
		line, _ := strconv.Atoi(sm[1])
		field, tag, value := sm[2], sm[3], sm[4]
		match := func(key, val *yaml.Node) bool {
			if field != "" {
				return key != nil && key.Line == line && key.Value == field
			}
			if val.Line != line || val.ShortTag() != tag {
				return false
			}
			short, cut := strings.CutSuffix(value, "...")
			return val.Kind != yaml.ScalarNode || val.Value == value || (cut && strings.HasPrefix(val.Value, short))
		}
		var found []place
		locate(&enc, orig, "", match, field != "", &found)
		found = deepest(found)
		_, rest, _ := strings.Cut(m, ": ")
		switch {
		case len(found) == 1:
			msgs[i] = fmt.Sprintf("%s: %s (line %d)", found[0].path, rest, found[0].line)
		case len(found) > 1 && !slices.ContainsFunc(found, func(p place) bool { return p.line != found[0].line }):
			msgs[i] = fmt.Sprintf("line %d: %s", found[0].line, rest) // several fields could be meant: the line at least
		}
	}
	return errors.New("decoding config: " + strings.Join(msgs, "; "))
}

// place is where a message may point: a YAML path and its line in the
// file.
type place struct {
	path string
	line int
}

// locate walks enc and its twin orig together and adds to found every
// entry match accepts (key is nil for a list's item), with the line of
// the twin's key when onKey, else of its value.
func locate(enc, orig *yaml.Node, path string, match func(key, val *yaml.Node) bool, onKey bool, found *[]place) {
	if enc == nil || orig == nil || enc.Kind != orig.Kind || len(enc.Content) != len(orig.Content) {
		return
	}
	switch enc.Kind {
	case yaml.DocumentNode:
		if len(enc.Content) == 1 {
			locate(enc.Content[0], orig.Content[0], path, match, onKey, found)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(enc.Content); i += 2 {
			p := enc.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if match(enc.Content[i], enc.Content[i+1]) {
				at := orig.Content[i+1].Line
				if onKey {
					at = orig.Content[i].Line
				}
				*found = append(*found, place{p, at})
			}
			locate(enc.Content[i+1], orig.Content[i+1], p, match, onKey, found)
		}
	case yaml.SequenceNode:
		for i := range enc.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if match(nil, enc.Content[i]) {
				*found = append(*found, place{p, orig.Content[i].Line})
			}
			locate(enc.Content[i], orig.Content[i], p, match, onKey, found)
		}
	default: // a scalar or an alias: nothing below it
	}
}

// deepest drops every place that contains another one: a list or map that
// cannot be decoded is the innermost one on its line.
func deepest(found []place) []place {
	var out []place
	for _, p := range found {
		inner := slices.ContainsFunc(found, func(q place) bool {
			return strings.HasPrefix(q.path, p.path+".") || strings.HasPrefix(q.path, p.path+"[")
		})
		if !inner {
			out = append(out, p)
		}
	}
	return out
}
