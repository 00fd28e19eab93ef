package llmusage_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/llmusage"
)

func ExampleMeter() {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n" +
		"data: [DONE]\n\n"
	m := llmusage.NewMeter(llmusage.Auto, "text/event-stream")
	// Forward the body to the client and the meter at once.
	io.Copy(io.MultiWriter(io.Discard, m), strings.NewReader(stream))
	u := m.Usage()
	fmt.Println(u.Input, u.Output, u.Total)
	// Output: 9 2 11
}

func ExampleParseRequest() {
	body := `{"model":"gpt-4o","max_tokens":500,"messages":[{"role":"user","content":"Summarise this page."}]}`
	r, err := llmusage.ParseRequest([]byte(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Model, r.MaxOutput, llmusage.EstimateTokens(r.PromptBytes, 4))
	// Output: gpt-4o 500 5
}

func ExampleMeter_Reset() {
	var m llmusage.Meter // one Meter, reused answer after answer
	for _, answer := range []string{
		`{"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
		`{"usage":{"input_tokens":4,"output_tokens":7}}`,
	} {
		m.Reset(llmusage.Auto, "application/json")
		io.WriteString(&m, answer)
		fmt.Println(m.Usage().Total)
	}
	// Output:
	// 11
	// 11
}
