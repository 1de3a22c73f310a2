package configfile

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one config mistake: where it is and what to change. Its text is
// one line: "FILE:LINE: PATH: MSG", the parts that are unknown left out.
type Error struct {
	// File is the config file's path; empty when the config came from
	// elsewhere.
	File string
	// Line is the 1-based line in the file; 0 when no line can be named
	// (a default that fails validation, say).
	Line int
	// Path is the field's YAML path, e.g. upstreams[0].limits.max_concurrency;
	// empty for the document as a whole.
	Path string
	// Msg says what is wrong and, where it can, what was meant.
	Msg string
	// Err is the error Msg was made from, if any (for errors.Is/As).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(strings.ReplaceAll(e.Msg, "\n", " "))
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// InFile returns err with file as its File when it is an *Error, else err
// prefixed with the file's name.
func InFile(err error, file string) error {
	if ce, ok := errors.AsType[*Error](err); ok {
		c := *ce
		c.File = file
		return &c
	}
	return fmt.Errorf("%s: %w", file, err)
}

// validationPathRE matches the YAML path a validate() error starts with.
var validationPathRE = regexp.MustCompile(`^([a-z_][a-z0-9_]*(?:\[[0-9]+\]|\.[A-Za-z0-9_./:-]+?)*): (.*)$`)

// At turns err, from a validate() method whose text starts with a YAML
// path ("upstreams[1].retry.base_delay: must be ..."), into an *Error at
// that path's line in root: the line of the deepest part of the path the
// file has (a field left to its default has none of its own). An error
// that names no path is returned as an *Error without one.
func At(root *yaml.Node, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	m := validationPathRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{Msg: err.Error(), Err: err}
	}
	return &Error{Line: Line(root, m[1]), Path: m[1], Msg: m[2], Err: err}
}

// Line returns the line of the value at path in root, or of the deepest
// part of path present; 0 when not even the first part is there. Map keys
// holding dots (model names such as gpt-4.1) are matched whole.
func Line(root *yaml.Node, path string) int {
	n := deref(root)
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = deref(n.Content[0])
	}
	line := 0
	rest := path
	for n != nil && rest != "" {
		rest = strings.TrimPrefix(rest, ".")
		switch {
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			if end < 0 || n.Kind != yaml.SequenceNode {
				return line
			}
			i, err := strconv.Atoi(rest[1:end])
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n, rest = deref(n.Content[i]), rest[end+1:]
			line = n.Line
		case n.Kind == yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if rest == k || strings.HasPrefix(rest, k+".") || strings.HasPrefix(rest, k+"[") {
					line = n.Content[i].Line
					n, rest, found = deref(n.Content[i+1]), rest[len(k):], true
					break
				}
			}
			if !found {
				return line
			}
		default:
			return line
		}
	}
	return line
}

// deref follows aliases to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}
