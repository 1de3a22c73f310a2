package configfile

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlErrorRE splits a YAML syntax error: its line and its message.
var yamlErrorRE = regexp.MustCompile(`^yaml: (?:line ([0-9]+): )?(.*)$`)

// Parse parses data as one YAML document into a node tree. A syntax error
// is an *Error at the line at fault: the YAML parser often names the line
// where the enclosing block began, so a line whose indentation matches no
// enclosing level, or that is indented with a tab, is named instead when
// there is one.
func Parse(data []byte) (*yaml.Node, error) {
	var root yaml.Node
	err := yaml.Unmarshal(data, &root)
	if err == nil {
		if root.Kind == 0 {
			return nil, &Error{Msg: "the file is empty"}
		}
		return &root, nil
	}
	e := &Error{Msg: err.Error(), Err: err}
	if m := yamlErrorRE.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "YAML syntax: " + m[2]
	}
	if line, msg := misIndented(data); line > 0 {
		e.Line, e.Msg = line, msg
	}
	return nil, e
}

// misIndented finds the first line indented with a tab, or whose
// indentation returns to a level no enclosing line has (a key indented one
// space short or over), and says what is wrong with it.
func misIndented(data []byte) (int, string) {
	levels := []int{0}
	inBlock := -1 // indentation of the key owning a | or > block scalar
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimRight(raw, " \r")
		body := strings.TrimLeft(line, " ")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		indent := len(line) - len(body)
		if inBlock >= 0 {
			if indent > inBlock {
				continue
			}
			inBlock = -1
		}
		if strings.HasPrefix(body, "\t") {
			return i + 1, "YAML syntax: indented with a tab; YAML indents with spaces only"
		}
		if strings.HasPrefix(body, "---") || strings.HasPrefix(body, "...") {
			levels = []int{0}
			continue
		}
		if top := levels[len(levels)-1]; indent < top {
			open := slices.Clone(levels)
			for len(levels) > 1 && levels[len(levels)-1] > indent {
				levels = levels[:len(levels)-1]
			}
			if levels[len(levels)-1] != indent {
				return i + 1, fmt.Sprintf("YAML syntax: this line is indented %d spaces, which lines up with no line above it (%s)", indent, describeLevels(open))
			}
		} else if indent > top {
			levels = append(levels, indent)
		}
		// A list item's content is one level deeper: "- name: a" opens the
		// level of "name".
		for strings.HasPrefix(body, "- ") {
			body = strings.TrimLeft(body[1:], " ")
			indent = len(line) - len(body)
			levels = append(levels, indent)
		}
		if strings.HasSuffix(body, "|") || strings.HasSuffix(body, ">") || strings.HasSuffix(body, "|-") || strings.HasSuffix(body, ">-") {
			inBlock = indent
		}
	}
	return 0, ""
}

func describeLevels(levels []int) string {
	parts := make([]string, len(levels))
	for i, l := range levels {
		parts[i] = strconv.Itoa(l)
	}
	return "the enclosing levels are at " + strings.Join(parts, ", ") + " spaces"
}
