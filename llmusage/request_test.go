package llmusage

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name, body string
		want       Request
	}{
		{"chat", `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Hello, world"}]}`,
			Request{Model: "gpt-4o", MaxOutput: 100, PromptBytes: 12}},
		{"chat new field, n", `{"model":"o3","max_completion_tokens":50,"n":3,"stream":true,"messages":[{"role":"system","content":"abcd"}]}`,
			Request{Model: "o3", MaxOutput: 150, PromptBytes: 4, Stream: true}},
		{"responses", `{"model":"gpt-4.1","max_output_tokens":64,"instructions":"be brief","input":"hi"}`,
			Request{Model: "gpt-4.1", MaxOutput: 64, PromptBytes: 10}},
		{"anthropic", `{"model":"claude-sonnet-4","max_tokens":1024,"system":"sys","messages":[{"role":"user","content":[{"type":"text","text":"abc"}]}]}`,
			Request{Model: "claude-sonnet-4", MaxOutput: 1024, PromptBytes: 6}},
		{"no maximum", `{"model":"m","messages":[]}`, Request{Model: "m"}},
		{"null maximum", `{"max_tokens":null}`, Request{}},
		{"largest of several", `{"max_tokens":10,"max_completion_tokens":20}`, Request{MaxOutput: 20}},
		{"huge", `{"max_tokens":1000000000000000000000}`, Request{MaxOutput: MaxCount}},
		{"huge n", `{"max_tokens":1000000,"n":10000000000}`, Request{MaxOutput: MaxCount}},
		{"escaped text counts as sent", `{"messages":[{"content":"a\nb"}]}`, Request{PromptBytes: 4}},
		{"nested max is text", `{"metadata":{"max_tokens":"5"}}`, Request{PromptBytes: 1}},
	}
	for _, c := range cases {
		got, err := ParseRequest([]byte(c.body))
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestParseRequestRefuses(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"zero", `{"max_tokens":0}`, "max_tokens must be a whole number"},
		{"negative", `{"max_tokens":-1}`, "max_tokens must be a whole number"},
		{"fraction", `{"max_completion_tokens":1.5}`, "max_completion_tokens must be a whole number"},
		{"string", `{"max_output_tokens":"100"}`, "max_output_tokens must be a whole number"},
		{"bool", `{"max_tokens":true}`, "max_tokens must be a whole number"},
		{"n zero", `{"n":0}`, "n must be a whole number"},
		{"max twice", `{"max_tokens":10,"max_tokens":100000}`, "max_tokens is sent twice"},
		{"model twice", `{"model":"cheap","model":"dear"}`, "model is sent twice"},
		{"model not string", `{"model":5}`, "model must be a string"},
		{"model too long", `{"model":"` + strings.Repeat("m", 300) + `"}`, "model must be a string"},
	}
	for _, c := range cases {
		_, err := ParseRequest([]byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	for _, body := range []string{"", "[1]", `"x"`, "5", `{"a":1`, `{"a":1}{}`, "max_tokens=5", "\x00"} {
		if _, err := ParseRequest([]byte(body)); !errors.Is(err, ErrNotJSON) {
			t.Errorf("%q: got %v, want ErrNotJSON", body, err)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(`{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		r, err := ParseRequest([]byte(body))
		if err == nil && (r.MaxOutput < 0 || r.MaxOutput > MaxCount || r.PromptBytes < 0 || len(r.Model) > MaxModel) {
			t.Fatalf("out of range: %+v", r)
		}
	})
}
