package llmusage

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Measure is what a limit counts of an LLM call: its input (prompt)
// tokens, its output (completion) tokens, or both.
type Measure uint8

const (
	// Total counts input and output tokens.
	Total Measure = iota
	// Input counts the prompt's tokens (cached ones included).
	Input
	// Output counts the tokens generated.
	Output
)

var measureNames = [...]string{"total", "input", "output"}

// String returns "total", "input" or "output".
func (m Measure) String() string {
	if int(m) < len(measureNames) {
		return measureNames[m]
	}
	return "unknown"
}

// ParseMeasure parses "total", "input" or "output".
func ParseMeasure(s string) (Measure, error) {
	for i, n := range measureNames {
		if n == s {
			return Measure(i), nil
		}
	}
	return 0, fmt.Errorf("llmusage: unknown measure %q (want total, input or output)", s)
}

// Format says where an answer reports its usage: JSON paths, each counted
// toward a measure. A measure's tokens are the sum of its fields; a field
// reported more than once (an Anthropic stream's message_start and
// message_delta, an OpenAI stream's chunks) counts its last value. A
// Format is immutable and safe for concurrent use.
type Format struct {
	name   string
	fields []field
}

// field is one number of the usage: any of its paths sets it.
type field struct {
	measure Measure
	paths   []path
}

// maxFields bounds the fields of a Format (a Meter holds one value each).
const maxFields = 8

// inner reports whether k is a key a path of f goes through (not its
// last): "usage", "message", "response" for the built-in formats.
func (f *Format) inner(k []byte) bool {
	for _, fl := range f.fields {
		for _, p := range fl.paths {
			for _, seg := range p[:len(p)-1] {
				if seg.key == string(k) {
					return true
				}
			}
		}
	}
	return false
}

// String returns the format's name: openai, anthropic, auto or pointers.
func (f *Format) String() string { return f.name }

var (
	openAIFields = []field{
		{Input, paths("/usage/prompt_tokens", "/usage/input_tokens", "/response/usage/input_tokens")},
		{Output, paths("/usage/completion_tokens", "/usage/output_tokens", "/response/usage/output_tokens")},
		{Total, paths("/usage/total_tokens", "/response/usage/total_tokens")},
	}
	anthropicFields = []field{
		{Input, paths("/usage/input_tokens", "/message/usage/input_tokens")},
		{Input, paths("/usage/cache_creation_input_tokens", "/message/usage/cache_creation_input_tokens")},
		{Input, paths("/usage/cache_read_input_tokens", "/message/usage/cache_read_input_tokens")},
		{Output, paths("/usage/output_tokens", "/message/usage/output_tokens")},
	}

	// OpenAI reads the usage of OpenAI's APIs and those compatible with
	// them: Chat Completions (usage.prompt_tokens, completion_tokens,
	// total_tokens; in a stream, the chunk that carries usage, sent with
	// stream_options.include_usage) and Responses (usage.input_tokens,
	// output_tokens, total_tokens; in a stream, response.completed's
	// response.usage).
	OpenAI = &Format{name: "openai", fields: openAIFields}

	// Anthropic reads the usage of Anthropic's Messages API: usage.
	// input_tokens (with cache_creation_input_tokens and
	// cache_read_input_tokens) and output_tokens; in a stream,
	// message_start's message.usage and message_delta's usage.
	Anthropic = &Format{name: "anthropic", fields: anthropicFields}

	// Auto reads both OpenAI's and Anthropic's: the fields of either that
	// an answer reports. It is what a limit in front of both APIs uses.
	Auto = &Format{name: "auto", fields: []field{
		{Input, paths("/usage/prompt_tokens", "/usage/input_tokens", "/message/usage/input_tokens", "/response/usage/input_tokens")},
		anthropicFields[1], anthropicFields[2],
		{Output, paths("/usage/completion_tokens", "/usage/output_tokens", "/message/usage/output_tokens", "/response/usage/output_tokens")},
		openAIFields[2],
	}}
)

// ParseFormat returns the Format named openai, anthropic or auto.
func ParseFormat(name string) (*Format, error) {
	for _, f := range []*Format{OpenAI, Anthropic, Auto} {
		if f.name == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("llmusage: unknown format %q (want openai, anthropic or auto)", name)
}

// Pointers returns the Format of an API that reports its usage at the
// given JSON pointers (RFC 6901, "/usage/in"); "" for a measure the API
// does not report (a missing total is the sum of input and output). In a
// stream, the pointers apply to each event's data.
func Pointers(input, output, total string) (*Format, error) {
	f := &Format{name: "pointers"}
	for m, ptr := range [...]string{Total: total, Input: input, Output: output} {
		if ptr == "" {
			continue
		}
		p, err := parsePointer(ptr)
		if err != nil {
			return nil, fmt.Errorf("llmusage: %s pointer: %w", Measure(m), err)
		}
		f.fields = append(f.fields, field{Measure(m), []path{p}})
	}
	if len(f.fields) == 0 {
		return nil, errors.New("llmusage: Pointers: no pointer given")
	}
	return f, nil
}

// path is a parsed JSON pointer.
type path []segment

// segment is one reference token of a pointer: a key, which also matches
// the array index it spells.
type segment struct {
	key   string
	index int64 // -1 when key is not an index
}

func (g segment) matches(s *scanner, level int) bool {
	if s.arr[level] {
		return g.index >= 0 && g.index == s.idx[level]
	}
	k := &s.key[level]
	return k.n <= maxKey && string(k.b[:k.n]) == g.key
}

func paths(ptrs ...string) []path {
	ps := make([]path, len(ptrs))
	for i, p := range ptrs {
		var err error
		if ps[i], err = parsePointer(p); err != nil {
			panic(err) // the built-in pointers are valid
		}
	}
	return ps
}

// parsePointer parses an RFC 6901 JSON pointer other than "" (the whole
// document is never a count).
func parsePointer(p string) (path, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q is not a JSON pointer (it starts with /)", p)
	}
	toks := strings.Split(p[1:], "/")
	if len(toks) > maxDepth {
		return nil, fmt.Errorf("%q is deeper than %d levels", p, maxDepth)
	}
	var out path
	for _, t := range toks {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(t, "~0", ""), "~1", ""), "~") {
			return nil, fmt.Errorf("%q: ~ must be followed by 0 or 1", p)
		}
		t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		if len(t) > maxKey {
			return nil, fmt.Errorf("%q: a key is longer than %d bytes", p, maxKey)
		}
		seg := segment{key: t, index: -1}
		if n, err := strconv.ParseInt(t, 10, 64); err == nil && n >= 0 && strconv.FormatInt(n, 10) == t {
			seg.index = n
		}
		out = append(out, seg)
	}
	return out, nil
}
