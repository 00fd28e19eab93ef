package api

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
	"github.com/sluicehq/sluice/policy"
)

// llmFields are what an LLM API request asks for, as a caller of
// /v1/check that calls the API itself reads them from its request body:
// what a limit counting tokens (a policy's cost: {tokens} or {prices})
// reserves.
type llmFields struct {
	Model       string `json:"model"`
	MaxTokens   *int64 `json:"max_tokens"`   // absent: the limit's default_max_tokens
	PromptBytes int64  `json:"prompt_bytes"` // the prompt's text, in bytes
}

// reserveLLM sets the reservation of the planned checks that count LLM
// tokens from f; a check that needs it without f is the caller's error.
// A request no such limit applies to ignores f.
func reserveLLM(planned []decide.Check, f *llmFields, hits int64) error {
	if decide.BodyBytes(planned) == 0 {
		return nil // llm, if given, is for limits the request does not meet
	}
	if hits != 1 {
		return fmt.Errorf("hits: a check of a limit that counts LLM tokens is one call (hits 1)")
	}
	if f == nil {
		return fmt.Errorf(`llm: required: a limit counts LLM tokens; give what the call asks for, {"model": "gpt-4o", "max_tokens": 500, "prompt_bytes": 12000}`)
	}
	req := llmusage.Request{Model: f.Model, PromptBytes: f.PromptBytes}
	switch {
	case len(f.Model) > llmusage.MaxModel:
		return fmt.Errorf("llm.model: longer than %d bytes", llmusage.MaxModel)
	case f.PromptBytes < 0 || f.PromptBytes > llmusage.MaxCount:
		return fmt.Errorf("llm.prompt_bytes: must be between 0 and %d (got %d)", int64(llmusage.MaxCount), f.PromptBytes)
	case f.MaxTokens != nil && (*f.MaxTokens < 1 || *f.MaxTokens > llmusage.MaxCount):
		return fmt.Errorf("llm.max_tokens: must be between 1 and %d (got %d)", int64(llmusage.MaxCount), *f.MaxTokens)
	case f.MaxTokens != nil:
		req.MaxOutput = *f.MaxTokens
	}
	return decide.ReserveFor(planned, &req)
}

// apiUsage is what an LLM call used, as a caller of /v1/settle read it
// from the answer: OpenAI's names or Anthropic's and the Responses API's
// (one of each pair), the total optional.
type apiUsage struct {
	InputTokens      *int64 `json:"input_tokens"`
	PromptTokens     *int64 `json:"prompt_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
}

// read checks u and returns it as a Meter would have read it from the
// answer: every count a whole number from 0 to llmusage.MaxCount, each
// measure given once, a total no less than input and output together.
func (u *apiUsage) read() (llmusage.Usage, error) {
	var out llmusage.Usage
	var err error
	out.Input, out.HasInput, err = oneCount("input_tokens", u.InputTokens, "prompt_tokens", u.PromptTokens)
	if err != nil {
		return out, err
	}
	out.Output, out.HasOutput, err = oneCount("output_tokens", u.OutputTokens, "completion_tokens", u.CompletionTokens)
	if err != nil {
		return out, err
	}
	out.Total, out.HasTotal, err = oneCount("total_tokens", u.TotalTokens, "", nil)
	switch {
	case err != nil:
		return out, err
	case !out.HasInput && !out.HasOutput && !out.HasTotal:
		return out, errors.New(`usage: give what the call used, {"input_tokens": 1200, "output_tokens": 350}`)
	case out.HasTotal && out.HasInput && out.HasOutput && out.Total < out.Input+out.Output:
		return out, fmt.Errorf("usage.total_tokens: %d is less than input and output together (%d)", out.Total, out.Input+out.Output)
	case !out.HasTotal && out.HasInput && out.HasOutput:
		out.Total, out.HasTotal = min(out.Input+out.Output, llmusage.MaxCount), true
	}
	return out, nil
}

// oneCount reads the count of a measure sent as name or alias (never
// both): ok false when neither is.
func oneCount(name string, v *int64, alias string, av *int64) (n int64, ok bool, err error) {
	switch {
	case v != nil && av != nil:
		return 0, false, fmt.Errorf("usage: %s and %s are one count; give one", name, alias)
	case v == nil && av == nil:
		return 0, false, nil
	case v == nil:
		name, v = alias, av
	}
	if *v < 0 || *v > llmusage.MaxCount {
		return 0, false, fmt.Errorf("usage.%s: must be between 0 and %d (got %d)", name, int64(llmusage.MaxCount), *v)
	}
	return *v, true, nil
}

// tokensOf returns the TokenCost a settle of e reads usage with: its
// limit's, as the policy in force has it, when e reserved for an LLM
// call; nil when it did not, or its limit no longer counts tokens (e is
// then settled as a cost).
func tokensOf(p *policy.Policy, e *settleEntry) *decide.TokenCost {
	if e.llm == nil || e.explicit || p == nil {
		return nil
	}
	_, l := p.FindLimit(e.name)
	if l == nil || l.Late() == nil {
		return nil
	}
	return l.Late().Tokens
}

// chargeUsage returns what e, whose limit reads usage with t, is charged
// under lim for usage u (decide.Charge, the gateway's reckoning): a
// usage that does not report what t counts (an output for a price, a
// total for a total) keeps the reservation.
func chargeUsage(e *settleEntry, t *decide.TokenCost, u *llmusage.Usage, lim sluice.Limit) decide.Settled {
	late := e.late
	late.Tokens = t
	c := decide.Check{Name: e.name, Key: e.key, Limit: lim, Late: &late, LLM: e.llm}
	resp := decide.Response{Usage: func(*llmusage.Format) *llmusage.Usage {
		if u == nil || !t.Reports(*u) {
			return nil
		}
		return u
	}}
	return decide.Charge(&c, e.reserved, lim, resp)
}
