// Package yamlload holds what sluice's strict YAML loaders share (policy
// files, Envoy rate limit service configs): decoding one document with its
// syntax errors as values with a line, alias resolution, mappings that
// report unknown and repeated keys, readers for strings, whole numbers,
// durations, booleans and lists of strings, and the collection of every
// error with its line.
//
// Each loader keeps its own error type: a Loader builds errors with the
// loader's New function from the line, the loader's place (a rule and a
// limit, a domain and a descriptor) and the field.
package yamlload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Loader walks one YAML tree and collects its errors. W is the loader's
// place type, handed to New with each error. A Loader is not safe for
// concurrent use.
type Loader[W any] struct {
	// New builds the error of one problem: line is the node's line (0
	// when the problem has none), w the place, field the field at fault
	// ("" when msg names it), msg what is wrong.
	New func(line int, w W, field, msg string) error
	// Errs are the errors so far, in the order found.
	Errs []error
}

// Fail records an error about node n (which may be nil: no line).
func (l *Loader[W]) Fail(n *yaml.Node, w W, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.FailAt(line, w, field, format, args...)
}

// FailAt records an error at a line (0: none).
func (l *Loader[W]) FailAt(line int, w W, field, format string, args ...any) {
	l.Errs = append(l.Errs, l.New(line, w, field, fmt.Sprintf(format, args...)))
}

// maxAliasHops bounds the aliases Resolve follows.
const maxAliasHops = 100

// Resolve follows aliases to the node they name (at most 100 hops).
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxAliasHops; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is a null scalar ("~", "null" or nothing).
func IsNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Show quotes a node's value for an error message, or names its kind.
func Show(n *yaml.Node) string {
	switch {
	case n == nil:
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return "nothing"
}

// Fields reads the mapping n, called field in errors, whose keys may be
// allowed: it returns each key's value (aliases resolved) and reports
// unknown and repeated keys, named field.KEY ("action.refuse"), or KEY
// when field is "" (the top of a file).
func (l *Loader[W]) Fields(n *yaml.Node, w W, field string, allowed ...string) map[string]*yaml.Node {
	prefix := ""
	if field != "" {
		prefix = field + "."
	}
	return l.mapping(n, w, field, prefix, allowed)
}

// Item is Fields for a mapping that is an item of a list whose place w
// already names (a rule, a limit, a descriptor): unknown and repeated keys
// are named KEY; field names the item only when it is not a mapping.
func (l *Loader[W]) Item(n *yaml.Node, w W, field string, allowed ...string) map[string]*yaml.Node {
	return l.mapping(n, w, field, "", allowed)
}

func (l *Loader[W]) mapping(n *yaml.Node, w W, field, prefix string, allowed []string) map[string]*yaml.Node {
	n = Resolve(n)
	out := map[string]*yaml.Node{}
	if n == nil || n.Kind != yaml.MappingNode {
		l.Fail(n, w, field, "want a mapping of %s", strings.Join(allowed, ", "))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(allowed, k.Value):
			l.Fail(k, w, "", "unknown field %q (known: %s)", prefix+k.Value, strings.Join(allowed, ", "))
		case out[k.Value] != nil:
			l.Fail(k, w, "", "field %q appears twice", prefix+k.Value)
		default:
			out[k.Value] = v
		}
	}
	return out
}

// Str reads a string; null reads as "". ok is false (and the error
// recorded) when n is not a scalar.
func (l *Loader[W]) Str(n *yaml.Node, w W, field string) (s string, ok bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		l.Fail(n, w, field, "want a string")
		return "", false
	}
	if IsNull(n) {
		return "", true
	}
	return n.Value, true
}

// Strings reads a string or a list of strings.
func (l *Loader[W]) Strings(n *yaml.Node, w W, field string) []string {
	if n != nil && n.Kind == yaml.ScalarNode {
		s, _ := l.Str(n, w, field)
		return []string{s}
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		l.Fail(n, w, field, "want a string or a list of strings")
		return nil
	}
	var out []string
	for _, c := range n.Content {
		if s, ok := l.Str(Resolve(c), w, field); ok {
			out = append(out, s)
		}
	}
	return out
}

// Int reads a whole number from min to max.
func (l *Loader[W]) Int(n *yaml.Node, w W, field string, min, max int64) (int64, bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		l.Fail(n, w, field, "want a whole number")
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && strings.HasPrefix(n.Value, "-"):
		l.Fail(n, w, field, "%s", tooSmall(min, n.Value))
	case err != nil && errors.Is(err, strconv.ErrRange):
		l.Fail(n, w, field, "must be at most %d (got %s)", max, n.Value)
	case err != nil:
		l.Fail(n, w, field, "%q is not a whole number", n.Value)
	case v < min:
		l.Fail(n, w, field, "%s", tooSmall(min, n.Value))
	case v > max:
		l.Fail(n, w, field, "must be at most %d (got %d)", max, v)
	default:
		return v, true
	}
	return 0, false
}

func tooSmall(min int64, got string) string {
	if min == 0 {
		return "must not be negative (got " + got + ")"
	}
	return fmt.Sprintf("must be at least %d (got %s)", min, got)
}

// Duration reads a duration as ParseDuration does.
func (l *Loader[W]) Duration(n *yaml.Node, w W, field string) (time.Duration, bool) {
	s, ok := l.Str(n, w, field)
	if !ok {
		return 0, false
	}
	d, err := ParseDuration(s)
	if err != nil {
		l.Fail(n, w, field, "%v", err)
		return 0, false
	}
	return d, true
}

// Bool reads true or false; like the YAML 1.1 readers other rate limiters'
// configurations were written for, it also takes yes/no and on/off, in
// any letter case.
func (l *Loader[W]) Bool(n *yaml.Node, w W, field string) bool {
	if n != nil && n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true", "yes", "on":
			return true
		case "false", "no", "off":
			return false
		}
	}
	l.Fail(n, w, field, "want true or false (got %s)", Show(n))
	return false
}

// ParseDuration reads a duration as people write it in configuration: Go's
// syntax ("1m30s", "250ms") plus days ("1d", "7d").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 366 {
			return 0, fmt.Errorf("%q is not a duration (days are written as a whole number from 0 to 366, like 7d)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write 500ms, 10s, 1m, 1h or 1d)", s)
	}
	return d, nil
}

// SyntaxError is a YAML syntax error: the line yaml gives (0 when it gives
// none) and its message without yaml's prefixes.
type SyntaxError struct {
	Line int
	Msg  string
	// Likely is the line that likely caused the error when yaml's Line is
	// where its block starts (see Locate); 0 when not known.
	Likely int
}

// Error returns "line 3: did not find expected node content", or the bare
// message when there is no line.
func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Syntax turns an error of go.yaml.in/yaml/v3 ("yaml: line 3: did not
// find expected node content") into a SyntaxError. That package gives its
// syntax errors only as text; this is the one place that reads it.
func Syntax(err error) *SyntaxError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, m, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				return &SyntaxError{Line: line, Msg: m}
			}
		}
	}
	return &SyntaxError{Msg: msg}
}

// Decode parses the one YAML document in data. It returns nil for an
// input without a document (empty, or only comments), a *SyntaxError for
// input that is not YAML, and in more the line of a second document (0 when
// there is none), which strict loaders refuse.
func Decode(data []byte) (doc *yaml.Node, more int, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		if err == io.EOF {
			return nil, 0, nil
		}
		se := Syntax(err)
		se.Locate(data)
		return nil, 0, se
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		return nil, 0, Syntax(err)
	default:
		more = max(extra.Line, 1)
	}
	return &first, more, nil
}

// Collect returns every error of type E in err's tree (through Unwrap()
// error and Unwrap() []error, as errors.Join and fmt.Errorf build it), in
// order. It does not look inside an E.
func Collect[E error](err error) []E {
	var out []E
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(E); ok {
			out = append(out, e)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			if c := u.Unwrap(); c != nil {
				walk(c)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Message formats a loader's error as `file:line: place: place: field:
// msg`, leaving out a line of 0 and the empty places and field. Each
// place is already worded (`rule "api"`), so that each loader's error
// type keeps its own places and they all read alike.
func Message(file string, line int, places []string, field, msg string) string {
	var b strings.Builder
	b.WriteString(file)
	if line > 0 {
		b.WriteString(":" + strconv.Itoa(line))
	}
	b.WriteString(": ")
	for _, p := range places {
		if p != "" {
			b.WriteString(p + ": ")
		}
	}
	if field != "" {
		b.WriteString(field + ": ")
	}
	b.WriteString(msg)
	return b.String()
}

// Named words a place for Message: kind and the quoted name, or "" when
// name is empty.
func Named(kind, name string) string {
	if name == "" {
		return ""
	}
	return kind + " " + strconv.Quote(name)
}

// Join returns the errors of list joined, one per line, without the
// prefix of the error err that carries them ("policy: invalid:"); err
// itself when list is empty (an error that is not about the file's
// content).
func Join[E error](err error, list []E) error {
	if len(list) == 0 {
		return err
	}
	errs := make([]error, len(list))
	for i, e := range list {
		errs[i] = e
	}
	return errors.Join(errs...)
}
