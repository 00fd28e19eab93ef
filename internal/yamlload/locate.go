package yamlload

import (
	"fmt"
	"strings"
)

// Locate adds to a syntax error of data the line that likely caused it,
// and what to do. go.yaml.in/yaml/v3 reports a block's errors ("did not
// find expected '-' indicator", "did not find expected key") at the line
// where the block starts (one before it, in fact), not at the line that
// broke it. Locate walks the block's lines from there by indentation: the
// first line indented between two levels of the block, or a list item
// among a mapping's keys (or a key among a list's items), is the likely
// one. It changes nothing when it finds none.
func (e *SyntaxError) Locate(data []byte) {
	if e == nil || e.Line == 0 || e.Likely != 0 ||
		!strings.Contains(e.Msg, "did not find expected '-' indicator") && !strings.Contains(e.Msg, "did not find expected key") {
		return
	}
	lines := strings.Split(string(data), "\n")
	line, hint := oddLine(lines, e.Line)
	if line == 0 {
		return
	}
	e.Likely = line
	e.Msg += fmt.Sprintf("; likely at line %d: %s", line, hint)
}

// level is one indentation level of a block: its column, and whether its
// lines are list items ("- ").
type level struct {
	indent int
	item   bool
}

// oddLine walks lines from from (1-based) and returns the first whose
// indentation does not fit the levels above it, with why; 0 when every
// line fits until the block ends.
func oddLine(lines []string, from int) (int, string) {
	var stack []level
	for i := from - 1; i < len(lines); i++ {
		text := strings.TrimRight(lines[i], " \r")
		body := strings.TrimLeft(text, " ")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		d, item := len(text)-len(body), body == "-" || strings.HasPrefix(body, "- ")
		if len(stack) > 0 && d < stack[0].indent {
			return 0, "" // the block ended
		}
		popped := 0
		for len(stack) > 0 && stack[len(stack)-1].indent > d {
			popped = stack[len(stack)-1].indent
			stack = stack[:len(stack)-1]
		}
		switch top := len(stack) - 1; {
		case top >= 0 && stack[top].indent == d && stack[top].item && !item:
			return i + 1, fmt.Sprintf("a key at the indentation of the list's items (%d spaces): start it with '- ', or indent it as the keys of the item above", d)
		case top >= 0 && stack[top].indent == d && !stack[top].item && item:
			return i + 1, fmt.Sprintf("a list item ('- ') among keys indented %d spaces: indent it under the key whose list it is", d)
		case top >= 0 && stack[top].indent == d:
		case popped > 0:
			return i + 1, fmt.Sprintf("indented %d spaces, between the %d of the lines before it and the %d of their parent: YAML nests by indentation, so align it with the lines of its level",
				d, popped, stack[top].indent)
		default:
			stack = append(stack, level{d, item})
		}
		if item { // the item's own keys start after "- "
			rest := strings.TrimLeft(body[1:], " ")
			if rest != "" && !strings.HasPrefix(rest, "#") {
				stack = append(stack, level{d + len(body) - len(rest), false})
			}
		}
	}
	return 0, ""
}
