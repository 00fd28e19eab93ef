package api

import (
	"fmt"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
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
