package decide

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llmusage"
)

// TokenCost is a LateCost read from the bodies of an LLM API call instead
// of a header: the request reserves what it asks for (Reserve: its prompt,
// estimated, and its maximum output), and the answer, read as it streams
// by (llmusage.Meter), settles what the call used. An answer that reports
// no usage (a stream cut, include_usage off) is charged an estimate from
// what it carried: the prompt's estimate and its text at CharsPerToken.
//
// What can be over-spent under a key is bounded by the estimation error
// of the calls in flight at once: each admitted call reserved its prompt
// estimate and its maximum output, so it can use more than it reserved
// only by the prompt's underestimate, or past its maximum when the API
// does not hold to it, and never more than LateCost.Max in all.
type TokenCost struct {
	// Format says where answers report their usage. Default llmusage.Auto
	// (OpenAI's and Anthropic's APIs).
	Format *llmusage.Format
	// Measure is what is counted: the call's input, output or total
	// tokens. The zero value is llmusage.Total.
	Measure llmusage.Measure
	// DefaultMaxOutput is the output a request that names no maximum
	// (max_tokens, max_completion_tokens, max_output_tokens) reserves.
	// Default 1024.
	DefaultMaxOutput int64
	// CharsPerToken is the bytes of text a token is estimated at, for the
	// prompt and for an answer without usage. Default 4.
	CharsPerToken int64
	// MaxRequestBytes bounds the request body read to reserve: a larger
	// body is refused with 413. Default 4 MiB.
	MaxRequestBytes int64
	// Prices, if set, makes the cost the call's price instead of its
	// tokens, in millionths of a currency unit (llmusage.Price), for the
	// model the request names; Measure is then unused. A model the table
	// has no price for is the client's error (400), never free.
	Prices *llmusage.Prices
}

// Defaults of TokenCost's fields.
const (
	DefaultMaxOutput       = 1024
	DefaultCharsPerToken   = 4
	DefaultMaxRequestBytes = 4 << 20
)

func (t *TokenCost) format() *llmusage.Format {
	if t.Format == nil {
		return llmusage.Auto
	}
	return t.Format
}

func (t *TokenCost) charsPerToken() int64 {
	if t.CharsPerToken <= 0 {
		return DefaultCharsPerToken
	}
	return t.CharsPerToken
}

func (t *TokenCost) maxRequestBytes() int64 {
	if t.MaxRequestBytes <= 0 {
		return DefaultMaxRequestBytes
	}
	return t.MaxRequestBytes
}

// Check reports a TokenCost that cannot work.
func (t *TokenCost) Check() error {
	switch {
	case t.Measure > llmusage.Output:
		return fmt.Errorf("unknown measure %d", t.Measure)
	case t.DefaultMaxOutput < 0 || t.DefaultMaxOutput > llmusage.MaxCount:
		return fmt.Errorf("DefaultMaxOutput must be between 0 (1024) and %d (got %d)", int64(llmusage.MaxCount), t.DefaultMaxOutput)
	case t.CharsPerToken < 0 || t.CharsPerToken > 64:
		return fmt.Errorf("CharsPerToken must be between 0 (4) and 64 (got %d)", t.CharsPerToken)
	case t.MaxRequestBytes < 0:
		return fmt.Errorf("MaxRequestBytes must not be negative (got %d)", t.MaxRequestBytes)
	}
	return nil
}

// reserve is what a call asking for req reserves under t, for a limit of
// the given capacity: at least 1 (every call is counted), at most the
// capacity (a call that asks for more is admitted only while the key's
// budget is whole).
func (t *TokenCost) reserve(req *llmusage.Request, capacity int64) int64 {
	in := llmusage.EstimateTokens(req.PromptBytes, t.charsPerToken())
	out := req.MaxOutput
	if out == 0 {
		out = t.DefaultMaxOutput
		if out == 0 {
			out = DefaultMaxOutput
		}
	}
	n := in + out
	if t.Prices != nil {
		p, _ := t.Prices.Of(req.Model) // ReserveFor refused a model without one
		n = p.Cost(in, out)
	}
	switch {
	case t.Prices != nil:
	case t.Measure == llmusage.Input:
		n = in
	case t.Measure == llmusage.Output:
		n = out
	}
	return max(1, min(n, capacity))
}

// actual is what a call that asked for req and reserved reserved is
// charged for the answer's usage u: its reservation when the answer could
// not be read (u nil).
func (t *TokenCost) actual(u *llmusage.Usage, req *llmusage.Request, reserved int64) (n int64, estimated bool) {
	if u == nil || req == nil && t.Prices != nil {
		return reserved, true // a price needs the request's model
	}
	var prompt int64
	if req != nil {
		prompt = llmusage.EstimateTokens(req.PromptBytes, t.charsPerToken())
	}
	if t.Prices != nil {
		p, ok := t.Prices.Of(req.Model)
		if !ok { // a table changed since the reservation: never free
			return reserved, true
		}
		in, inEst := u.Tokens(llmusage.Input, prompt, t.charsPerToken())
		out, outEst := u.Tokens(llmusage.Output, prompt, t.charsPerToken())
		return p.Cost(in, out), inEst || outEst
	}
	return u.Tokens(t.Measure, prompt, t.charsPerToken())
}

// Reports says whether u reports every count t charges: the input and
// output tokens when t prices them, else those of t.Measure (a total, or
// input and output), so that a settle from u estimates nothing.
func (t *TokenCost) Reports(u llmusage.Usage) bool {
	if t.Prices != nil {
		return u.HasInput && u.HasOutput
	}
	_, estimated := u.Tokens(t.Measure, 0, 1)
	return !estimated
}

// BodyBytes returns the largest request body a check of checks reads to
// reserve (TokenCost.MaxRequestBytes), 0 when none reads it.
func BodyBytes(checks []Check) int64 {
	var n int64
	for i := range checks {
		if lc := checks[i].Late; lc != nil && lc.Tokens != nil {
			n = max(n, lc.Tokens.maxRequestBytes())
		}
	}
	return n
}

// ErrBodyTooLarge is the error front-ends report for a request body
// longer than BodyBytes: a *ClientError answered with 413.
var ErrBodyTooLarge = errors.New("larger than the limit reads")

// Reserve plans what each check of checks that settles a TokenCost
// reserves for the LLM request whose JSON body is body: it sets the
// check's Cost to the reservation and its LLM to what the request asks
// for, which the settle reads. A body that is not a JSON object, or whose
// maximum or model is not valid (llmusage.ParseRequest), is a *ClientError
// (400), and nothing is planned. It is the step between planning and Run
// of every front-end that has the request's body.
func Reserve(checks []Check, body []byte) error {
	if BodyBytes(checks) == 0 {
		return nil
	}
	req, err := llmusage.ParseRequest(body)
	if err != nil {
		return &ClientError{Field: "body", Reason: err.Error()}
	}
	return ReserveFor(checks, &req)
}

// ReserveFor is Reserve for a request already read: req.
func ReserveFor(checks []Check, req *llmusage.Request) error {
	for i := range checks {
		c := &checks[i]
		if c.Late == nil || c.Late.Tokens == nil {
			continue
		}
		if ps := c.Late.Tokens.Prices; ps != nil {
			if _, ok := ps.Of(req.Model); !ok {
				return &ClientError{Limit: c.Name, Field: "body model", Reason: fmt.Sprintf("%q has no price (the models priced are those of the limit's price table)", req.Model)}
			}
		}
		c.LLM = req
		c.Cost = c.Late.Tokens.reserve(req, c.Limit.Capacity())
	}
	return nil
}

// checkTokens reports a LateCost with Tokens that cannot work under limit.
func (lc *LateCost) checkTokens(limit sluice.Limit) error {
	if lc.Header != "" {
		return errors.New("a late cost reads a header or the LLM answer (Tokens), not both")
	}
	if err := lc.Tokens.Check(); err != nil {
		return fmt.Errorf("Tokens: %w", err)
	}
	if lc.Max > limit.Capacity()+limit.MaxAdjust() {
		return fmt.Errorf("Max must be at most %d, the capacity and the deepest debt one settle may leave (got %d)", limit.Capacity()+limit.MaxAdjust(), lc.Max)
	}
	return nil
}

// source names where lc reads the cost, for logs.
func (lc *LateCost) source() string {
	if lc.Tokens != nil {
		return "the LLM answer's usage"
	}
	return "header " + lc.Header
}
