package llmusage

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// Request is what an LLM API request asks for, as ParseRequest reads it
// from its JSON body: what a reservation is made of.
type Request struct {
	// Model is the top-level "model" ("" when the body has none).
	Model string
	// MaxOutput is the most output tokens the request allows: its
	// max_tokens, max_completion_tokens or max_output_tokens (the largest
	// if it sends several), times n (the choices asked for); 0 when it
	// names no maximum.
	MaxOutput int64
	// PromptBytes counts the bytes of the body's text, the strings other
	// than the model, the roles and the types, as sent: what the prompt's
	// tokens are estimated from.
	PromptBytes int64
	// Stream is the top-level "stream": true.
	Stream bool
}

// MaxModel bounds the length of a request's model name.
const MaxModel = 256

// ErrNotJSON reports a request body that is not one JSON object.
var ErrNotJSON = errors.New("llmusage: the body is not one JSON object")

// ParseRequest reads r from the JSON body of an LLM API request (OpenAI's
// Chat Completions and Responses, Anthropic's Messages, and APIs shaped
// like them). It reads body in one pass with fixed memory. A body that is
// not one JSON object is ErrNotJSON; a maximum or n that is not a whole
// number from 1 to MaxCount, a model that is not a string of at most
// MaxModel bytes, or a model, maximum or n sent twice is an error that
// names the field: an API reads one of two copies, and which is not
// known.
func ParseRequest(body []byte) (Request, error) {
	p := reqParsers.Get().(*reqParser)
	defer reqParsers.Put(p)
	*p = reqParser{}
	p.sc.v = p
	for _, c := range body {
		if !isSpace(c) {
			p.object = c == '{'
			break
		}
	}
	p.sc.write(body)
	switch {
	case p.err != nil:
		return Request{}, p.err
	case !p.sc.complete() || !p.object:
		return Request{}, ErrNotJSON
	}
	r := p.r
	if p.n > 1 && r.MaxOutput > 0 {
		r.MaxOutput = MaxCount
		if r.MaxOutput/p.n >= p.r.MaxOutput {
			r.MaxOutput = p.r.MaxOutput * p.n
		}
	}
	return r, nil
}

// reqParsers recycles the parsers' state (about 3 KB, most of it the
// scanner's): a request's parse allocates nothing but its model's name.
var reqParsers = sync.Pool{New: func() any { return new(reqParser) }}

type reqParser struct {
	sc     scanner
	r      Request
	n      int64
	seen   [5]bool // model, max_tokens, max_completion_tokens, max_output_tokens, n
	object bool
	err    error
}

var topFields = [...]string{"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "n"}

func (p *reqParser) keyed(*scanner) {}

func (p *reqParser) visit(s *scanner, k valueKind, text []byte, raw int64) {
	if p.err != nil {
		return
	}
	key := string(s.lastKey())
	if s.depth == 1 && p.object {
		for i, f := range topFields {
			if key == f {
				p.top(i, k, text, s.over)
				return
			}
		}
		if key == "stream" {
			p.r.Stream = k == kTrue
		}
	}
	if k == kString && key != "model" && key != "role" && key != "type" {
		p.r.PromptBytes = min(p.r.PromptBytes+raw, MaxCount)
	}
}

// top reads the top-level field topFields[i].
func (p *reqParser) top(i int, k valueKind, text []byte, over bool) {
	name := topFields[i]
	if p.seen[i] {
		p.err = fmt.Errorf("llmusage: %s is sent twice", name)
		return
	}
	p.seen[i] = true
	if i == 0 {
		if k != kString || over || len(text) > MaxModel {
			p.err = fmt.Errorf("llmusage: model must be a string of at most %d bytes", MaxModel)
			return
		}
		p.r.Model = string(text)
		return
	}
	if k == kNull { // an explicit "no maximum"
		return
	}
	n := count(k, text, over)
	if n < 1 {
		p.err = fmt.Errorf("llmusage: %s must be a whole number from 1 to %d (got %s)", name, int64(MaxCount), shown(k, text))
		return
	}
	if i == 4 {
		p.n = n
		return
	}
	p.r.MaxOutput = max(p.r.MaxOutput, n)
}

// shown renders a value in an error.
func shown(k valueKind, text []byte) string {
	switch k {
	case kString:
		return "a string"
	case kTrue, kFalse:
		return "a boolean"
	case kNumber:
		return strconv.Quote(string(text))
	}
	return "null"
}
