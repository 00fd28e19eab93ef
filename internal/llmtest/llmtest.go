// Package llmtest is a stand-in LLM API for tests and demos: OpenAI's
// Chat Completions (/v1/chat/completions) and Anthropic's Messages
// (/v1/messages), answered in JSON or streamed as server-sent events, with
// the usage each API reports. It counts tokens as llmusage estimates them
// (4 bytes of text a token), scaled by Config.PromptPercent, and generates
// exactly the maximum output a request asks for ("tok " a token).
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/llmusage"
)

// Config configures the stand-in. The zero value answers at once with
// usage as estimated.
type Config struct {
	// PromptPercent scales the prompt tokens reported, in percent of the
	// estimate (4 bytes a token): 110 reports 10% more. Default 100.
	PromptPercent int64
	// DefaultOutput is the output of a request without a maximum. Default 16.
	DefaultOutput int64
	// MaxOutput is the model's own bound on output: a request asking for
	// more gets this much. Default 32768.
	MaxOutput int64
	// ChunkTokens is the tokens per streamed event. Default 8.
	ChunkTokens int64
	// Pause is the time between streamed events. Default none.
	Pause time.Duration
}

// Server is the stand-in's handler. It counts the tokens it reported.
type Server struct {
	cfg Config
	// Tokens is the total (input and output) tokens of every answer
	// completed; Calls counts them.
	Tokens, Calls atomic.Int64
}

// New returns a stand-in configured by cfg.
func New(cfg Config) *Server {
	if cfg.PromptPercent <= 0 {
		cfg.PromptPercent = 100
	}
	if cfg.DefaultOutput <= 0 {
		cfg.DefaultOutput = 16
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 32768
	}
	if cfg.ChunkTokens <= 0 {
		cfg.ChunkTokens = 8
	}
	return &Server{cfg: cfg}
}

type call struct {
	anthropic    bool
	stream       bool
	includeUsage bool
	in, out      int64
	model        string
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := s.read(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case c.stream && c.anthropic:
		s.anthropicStream(w, c)
	case c.stream:
		s.openAIStream(w, c)
	case c.anthropic:
		writeJSON(w, map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": c.model,
			"content": []any{map[string]any{"type": "text", "text": text(c.out)}},
			"usage":   map[string]any{"input_tokens": c.in, "output_tokens": c.out}})
	default:
		writeJSON(w, map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": c.model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text(c.out)}, "finish_reason": "length"}},
			"usage":   map[string]any{"prompt_tokens": c.in, "completion_tokens": c.out, "total_tokens": c.in + c.out}})
	}
	s.Tokens.Add(c.in + c.out)
	s.Calls.Add(1)
}

func (s *Server) read(r *http.Request) (call, error) {
	var raw struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return call{}, err
	}
	if err := json.Unmarshal(buf, &raw); err != nil {
		return call{}, err
	}
	req, err := llmusage.ParseRequest(buf)
	if err != nil {
		return call{}, err
	}
	c := call{anthropic: strings.HasSuffix(r.URL.Path, "/messages"), stream: raw.Stream, includeUsage: raw.StreamOptions.IncludeUsage, model: req.Model}
	c.in = llmusage.EstimateTokens(req.PromptBytes, 4) * s.cfg.PromptPercent / 100
	c.out = min(req.MaxOutput, s.cfg.MaxOutput)
	if c.out == 0 {
		c.out = s.cfg.DefaultOutput
	}
	return c, nil
}

func text(tokens int64) string { return strings.Repeat("tok ", int(tokens)) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// events writes server-sent events, pausing between them.
type events struct {
	w     http.ResponseWriter
	pause time.Duration
}

func (e events) send(event string, v any) {
	b, _ := json.Marshal(v)
	if event != "" {
		fmt.Fprintf(e.w, "event: %s\n", event)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	http.NewResponseController(e.w).Flush()
	if e.pause > 0 {
		time.Sleep(e.pause)
	}
}

func (s *Server) start(w http.ResponseWriter) events {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return events{w, s.cfg.Pause}
}

func (s *Server) openAIStream(w http.ResponseWriter, c call) {
	e := s.start(w)
	for done := int64(0); done < c.out; done += s.cfg.ChunkTokens {
		n := min(s.cfg.ChunkTokens, c.out-done)
		e.send("", map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": c.model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": text(n)}}}})
	}
	if c.includeUsage {
		e.send("", map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []any{},
			"usage": map[string]any{"prompt_tokens": c.in, "completion_tokens": c.out, "total_tokens": c.in + c.out}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *Server) anthropicStream(w http.ResponseWriter, c call) {
	e := s.start(w)
	e.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_1", "model": c.model,
		"usage": map[string]any{"input_tokens": c.in, "output_tokens": 1}}})
	e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for done := int64(0); done < c.out; done += s.cfg.ChunkTokens {
		n := min(s.cfg.ChunkTokens, c.out-done)
		e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text(n)}})
	}
	e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "max_tokens"}, "usage": map[string]any{"output_tokens": c.out}})
	e.send("message_stop", map[string]any{"type": "message_stop"})
}
