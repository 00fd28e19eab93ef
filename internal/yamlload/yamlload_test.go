package yamlload

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// testLoader records errors as "line: place: field: msg".
func testLoader() *Loader[string] {
	return &Loader[string]{New: func(line int, w, field, msg string) error {
		if field != "" {
			msg = field + ": " + msg
		}
		return fmt.Errorf("%d: %s: %s", line, w, msg)
	}}
}

func node(t *testing.T, src string) *yaml.Node {
	t.Helper()
	doc, _, err := Decode([]byte(src))
	if err != nil || doc == nil {
		t.Fatalf("%q: %v", src, err)
	}
	return doc.Content[0]
}

// TestSyntax pins the form of go.yaml.in/yaml/v3's syntax errors, which
// Syntax reads: a change of that package's text fails here.
func TestSyntax(t *testing.T) {
	for src, want := range map[string]SyntaxError{
		"a: [1,\n":          {Line: 1, Msg: "did not find expected node content"},
		"a: 1\nb: 2\nc 2\n": {Line: 3, Msg: "could not find expected ':'"},
		"a: \x01\n":         {Msg: "control characters are not allowed"},
	} {
		_, _, err := Decode([]byte(src))
		var se *SyntaxError
		if !errors.As(err, &se) || *se != want {
			t.Errorf("Decode(%q) = %#v, want %#v", src, err, want)
		}
	}
	if doc, more, err := Decode([]byte("# only a comment\n")); doc != nil || more != 0 || err != nil {
		t.Errorf("a comment: %v %d %v", doc, more, err)
	}
	if _, more, err := Decode([]byte("a: 1\n---\nb: 2\n")); more != 2 || err != nil {
		t.Errorf("two documents: more %d, %v", more, err)
	}
}

func TestReaders(t *testing.T) {
	l := testLoader()
	f := l.Fields(node(t, "x: 1\ny: -2\nz: 1.5\nx: 3\nbad: 1\nbig: 99999999999999999999\n"), "here", "m", "x", "y", "z", "big")
	l.Int(f["y"], "here", "m.y", 0, 10)
	l.Int(f["y"], "here", "m.y", 1, 10)
	l.Int(f["z"], "here", "m.z", 0, 10)
	l.Int(f["big"], "here", "m.big", 0, 10)
	if v, ok := l.Int(f["x"], "here", "m.x", 0, 10); v != 1 || !ok {
		t.Errorf("x = %d, %v", v, ok)
	}
	it := l.Item(node(t, "[1]\n"), "item", "rules", "name")
	l.Item(node(t, "name: a\nnmae: b\n"), "item", "rules", "name")
	l.Bool(node(t, "maybe\n"), "here", "b")
	if got := l.Strings(node(t, "[a, b]\n"), "here", "s"); strings.Join(got, ",") != "a,b" {
		t.Errorf("strings %q", got)
	}
	l.Duration(node(t, "1 hour\n"), "here", "d")
	want := []string{
		`4: here: field "m.x" appears twice`,
		`5: here: unknown field "m.bad" (known: x, y, z, big)`,
		`2: here: m.y: must not be negative (got -2)`,
		`2: here: m.y: must be at least 1 (got -2)`,
		`3: here: m.z: "1.5" is not a whole number`,
		`6: here: m.big: must be at most 10 (got 99999999999999999999)`,
		`1: item: rules: want a mapping of name`,
		`2: item: unknown field "nmae" (known: name)`,
		`1: here: b: want true or false (got "maybe")`,
		`1: here: d: "1 hour" is not a duration (write 500ms, 10s, 1m, 1h or 1d)`,
	}
	var got []string
	for _, e := range l.Errs {
		got = append(got, e.Error())
	}
	if len(it) != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCollect(t *testing.T) {
	a, b := &SyntaxError{Line: 1, Msg: "a"}, &SyntaxError{Line: 2, Msg: "b"}
	err := fmt.Errorf("wrapped: %w", errors.Join(a, errors.New("other"), fmt.Errorf("x: %w", b)))
	if got := Collect[*SyntaxError](err); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("Collect = %v", got)
	}
	if got := Collect[*SyntaxError](nil); got != nil {
		t.Errorf("Collect(nil) = %v", got)
	}
}

// TestMessage: the parts an error has, in order, and none it lacks.
func TestMessage(t *testing.T) {
	for _, tc := range []struct {
		line        int
		places      []string
		field, want string
	}{
		{3, []string{Named("rule", "api"), Named("limit", `per "ip"`)}, "count", `p.yaml:3: rule "api": limit "per \"ip\"": count: bad`},
		{0, []string{Named("rule", ""), "descriptor a/b"}, "", "p.yaml: descriptor a/b: bad"},
		{7, nil, "rules", "p.yaml:7: rules: bad"},
	} {
		if got := Message("p.yaml", tc.line, tc.places, tc.field, "bad"); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// TestJoin: the listed errors one per line, or the carrier when there are
// none.
func TestJoin(t *testing.T) {
	carrier := errors.New("policy: invalid")
	if got := Join[error](carrier, nil); got != carrier {
		t.Fatalf("Join of none = %v, want the carrier", got)
	}
	if got := Join(carrier, []error{errors.New("a"), errors.New("b")}).Error(); got != "a\nb" {
		t.Fatalf("Join = %q", got)
	}
}
