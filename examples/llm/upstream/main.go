// Command upstream is a stand-in LLM API for the example policy: OpenAI's
// Chat Completions (/v1/chat/completions) and Anthropic's Messages
// (/v1/messages), in JSON or streamed, with usage. It generates exactly
// the max_tokens a request asks for and counts the prompt at 4 bytes a
// token (scaled by -prompt-percent), so that what sluice charges can be
// checked by hand:
//
//	go run ./examples/llm/upstream -addr 127.0.0.1:9000
//	curl -s localhost:9000/v1/chat/completions -d '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"Hello"}]}'
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/llmtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "the address to serve on")
	prompt := flag.Int64("prompt-percent", 100, "the prompt tokens reported, in percent of 4 bytes a token")
	pause := flag.Duration("pause", 2*time.Millisecond, "the pause between streamed events")
	flag.Parse()
	up := llmtest.New(llmtest.Config{PromptPercent: *prompt, Pause: *pause})
	log.Printf("stand-in LLM API on http://%s", *addr)
	log.Fatal(http.ListenAndServe(*addr, up))
}
