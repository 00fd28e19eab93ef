package yamlload

import (
	"errors"
	"strings"
	"testing"
)

// misindented is a policy whose line 10 is indented one space short: yaml
// reports line 4 (one before the list that line 10 breaks).
const misindented = `# the API's limits
rules:
  - name: api
    limits:
      - name: per-ip
        key: ip
        algorithm: gcra
        rate: 5/s
      - name: per-user
       key: header:X-User
        algorithm: gcra
        rate: 1/s
`

// TestLocate: a syntax error yaml reports at the start of its block
// names the line that likely broke it, with what to do; an error Locate
// cannot place is left as yaml gave it.
func TestLocate(t *testing.T) {
	for _, c := range []struct {
		name, src   string
		line, likel int
		hint        string
	}{
		{"between two levels", misindented, 4, 10, "; likely at line 10: indented 7 spaces, between the 8 of the lines before it and the 6 of their parent: YAML nests by indentation"},
		{"a key among list items", "rules:\n  - name: a\n    limits: []\n  match: {path: /}\n", 1, 4, "; likely at line 4: a key at the indentation of the list's items (2 spaces)"},
		{"a list item among keys", "rules:\n  - name: a\n    limits:\n      - {name: b}\n    - name: c\n", 1, 5, "; likely at line 5: a list item ('- ') among keys indented 4 spaces"},
		{"not a block error", "a: [1,\n", 1, 0, ""},
	} {
		_, _, err := Decode([]byte(c.src))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%s: %v, want a syntax error", c.name, err)
			continue
		}
		if se.Line != c.line || se.Likely != c.likel || c.hint != "" && !strings.Contains(se.Msg, c.hint) || c.hint == "" && strings.Contains(se.Msg, "likely") {
			t.Errorf("%s: line %d, likely %d, %q; want line %d, likely %d, %q", c.name, se.Line, se.Likely, se.Msg, c.line, c.likel, c.hint)
		}
	}
}
