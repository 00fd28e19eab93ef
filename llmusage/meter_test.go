package llmusage

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	openAIJSON    = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}`
	responsesJSON = `{"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"total_tokens":27}}`
	anthropicJSON = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hello!"}],"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":2,"output_tokens":6}}`

	openAISSE = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n" +
		"data: [DONE]\n\n"
	anthropicSSE = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		": a comment\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	responsesSSE = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":30,\"output_tokens\":4,\"total_tokens\":34}}}\n\n"
)

// meter feeds body to a new Meter in pieces of size n (all at once when 0).
func meter(f *Format, ct, body string, n int) Usage {
	m := NewMeter(f, ct)
	b := []byte(body)
	if n == 0 {
		n = len(b) + 1
	}
	for len(b) > 0 {
		k := min(n, len(b))
		m.Write(b[:k])
		b = b[k:]
	}
	return m.Usage()
}

func TestMeterFormats(t *testing.T) {
	cases := []struct {
		name, ct, body string
		f              *Format
		in, out, total int64
	}{
		{"openai json", "application/json", openAIJSON, OpenAI, 12, 3, 15},
		{"openai json auto", "application/json; charset=utf-8", openAIJSON, Auto, 12, 3, 15},
		{"responses json", "application/json", responsesJSON, OpenAI, 20, 7, 27},
		{"anthropic json", "application/json", anthropicJSON, Anthropic, 17, 6, 23},
		{"anthropic json auto", "application/json", anthropicJSON, Auto, 17, 6, 23},
		{"openai sse", "text/event-stream", openAISSE, Auto, 9, 2, 11},
		{"openai sse crlf", "text/event-stream; charset=utf-8", strings.ReplaceAll(openAISSE, "\n", "\r\n"), OpenAI, 9, 2, 11},
		{"openai sse cr", "text/event-stream", strings.ReplaceAll(openAISSE, "\n", "\r"), OpenAI, 9, 2, 11},
		{"anthropic sse", "text/event-stream", anthropicSSE, Anthropic, 25, 15, 40},
		{"anthropic sse auto", "text/event-stream", anthropicSSE, Auto, 25, 15, 40},
		{"responses sse", "text/event-stream", responsesSSE, Auto, 30, 4, 34},
	}
	for _, c := range cases {
		for _, n := range []int{0, 1, 2, 7, 64} { // every split across writes
			u := meter(c.f, c.ct, c.body, n)
			if !u.HasInput || !u.HasOutput || !u.HasTotal || u.Input != c.in || u.Output != c.out || u.Total != c.total {
				t.Errorf("%s, pieces of %d: got %+v, want in %d out %d total %d", c.name, n, u, c.in, c.out, c.total)
			}
		}
	}
}

// TestMeterIgnores: what is not usage at its place counts nothing.
func TestMeterIgnores(t *testing.T) {
	cases := []struct{ name, ct, body string }{
		{"sse comment", "text/event-stream", ": {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"},
		{"sse comment data", "text/event-stream", ":data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"},
		{"sse other field", "text/event-stream", "event: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"},
		{"sse field prefix", "text/event-stream", "database: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"},
		{"sse event never dispatched", "text/event-stream", "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n"},
		{"sse event cut", "text/event-stream", "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}\n\n"},
		{"sse json body as stream", "text/event-stream", openAIJSON},
		{"usage in a string", "application/json", `{"choices":[{"message":{"content":"\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":5}"}}]}`},
		{"usage nested elsewhere", "application/json", `{"x":{"usage":{"prompt_tokens":5,"completion_tokens":5}}}`},
		{"json cut", "application/json", openAIJSON[:len(openAIJSON)-1]},
		{"json trailing garbage", "application/json", openAIJSON + "x"},
		{"two documents", "application/json", openAIJSON + openAIJSON},
		{"not json", "application/json", "usage: prompt_tokens=5"},
		{"html", "text/html", "<html>" + openAIJSON},
		{"empty", "application/json", ""},
		{"sse as json", "application/json", openAISSE},
	}
	for _, c := range cases {
		for _, n := range []int{0, 1, 3} {
			u := meter(Auto, c.ct, c.body, n)
			if u.HasInput || u.HasOutput || u.HasTotal {
				t.Errorf("%s, pieces of %d: got %+v, want no usage", c.name, n, u)
			}
		}
	}
}

// TestMeterAbsurd: counts that are not whole numbers make a measure
// unknown (estimated), huge ones read as MaxCount.
func TestMeterAbsurd(t *testing.T) {
	cases := []struct {
		name, usage   string
		hasIn, hasOut bool
		in, out       int64
	}{
		{"negative", `{"prompt_tokens":-5,"completion_tokens":3}`, false, true, 0, 3},
		{"fraction", `{"prompt_tokens":1.5,"completion_tokens":3}`, false, true, 0, 3},
		{"exponent", `{"prompt_tokens":1e3,"completion_tokens":3}`, false, true, 0, 3},
		{"string", `{"prompt_tokens":"5","completion_tokens":3}`, false, true, 0, 3},
		{"null", `{"prompt_tokens":null,"completion_tokens":3}`, false, true, 0, 3},
		{"huge", `{"prompt_tokens":99999999999999999999999,"completion_tokens":3}`, true, true, MaxCount, 3},
		{"very long", `{"prompt_tokens":` + strings.Repeat("9", 1000) + `,"completion_tokens":3}`, true, true, MaxCount, 3},
		{"repeated, last wins", `{"prompt_tokens":1,"prompt_tokens":7,"completion_tokens":3}`, true, true, 7, 3},
	}
	for _, c := range cases {
		u := meter(OpenAI, "application/json", `{"usage":`+c.usage+`}`, 5)
		if u.HasInput != c.hasIn || u.HasOutput != c.hasOut || u.Input != c.in || u.Output != c.out {
			t.Errorf("%s: got %+v", c.name, u)
		}
	}
}

// TestMeterBoundedMemory: a huge line, a deep document and a long key
// are read in fixed memory, and the usage after them still counts.
func TestMeterBoundedMemory(t *testing.T) {
	huge := strings.Repeat("x", 8<<20)
	body := `{"choices":[{"message":{"content":"` + huge + `"}}],"` + strings.Repeat("k", 10000) + `":1,"usage":{"prompt_tokens":4,"completion_tokens":2}}`
	m := NewMeter(Auto, "application/json")
	allocs := testing.AllocsPerRun(1, func() { m.Write([]byte(body)) })
	if allocs > 0 {
		t.Errorf("Write allocated %v times", allocs)
	}
	if u := meter(Auto, "application/json", body, 4096); u.Input != 4 || u.Output != 2 || u.Text != int64(len(huge)) {
		t.Errorf("got %+v", u)
	}
	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"" + huge + "\"}}]}\n\ndata: {\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n"
	if u := meter(Auto, "text/event-stream", sse, 4096); u.Input != 4 || u.Output != 2 || u.Text != int64(len(huge)) {
		t.Errorf("sse: got in %d out %d text %d", u.Input, u.Output, u.Text)
	}
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	if u := meter(Auto, "application/json", deep, 0); u.HasInput {
		t.Errorf("deep: got %+v", u)
	}
	// A deep event spoils only itself.
	if u := meter(Auto, "text/event-stream", "data: "+deep+"\n\n"+openAISSE, 0); u.Input != 9 {
		t.Errorf("deep event, then a stream: got %+v", u)
	}
}

// TestMeterEstimate: a stream without usage reports the text it carried.
func TestMeterEstimate(t *testing.T) {
	cut := openAISSE[:strings.Index(openAISSE, "data: {\"id\":\"c\",\"choices\":[],")]
	u := meter(Auto, "text/event-stream", cut, 3)
	if u.HasInput || u.HasOutput || u.Text != 5 {
		t.Fatalf("got %+v, want no usage and 5 bytes of text", u)
	}
	if n, est := u.Tokens(Total, 100, 4); n != 102 || !est {
		t.Errorf("Tokens(Total) = %d, %v; want 100 + ceil(5/4) = 102, estimated", n, est)
	}
	if n, est := u.Tokens(Output, 100, 4); n != 2 || !est {
		t.Errorf("Tokens(Output) = %d, %v", n, est)
	}
	full := meter(Auto, "text/event-stream", openAISSE, 0)
	if n, est := full.Tokens(Total, 100, 4); n != 11 || est {
		t.Errorf("reported: Tokens(Total) = %d, %v", n, est)
	}
}

func TestMeterReader(t *testing.T) {
	m := NewMeter(nil, "text/event-stream")
	r := iotest.OneByteReader(strings.NewReader(anthropicSSE))
	buf := make([]byte, 16)
	for {
		n, err := r.Read(buf)
		m.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if u := m.Usage(); u.Total != 40 {
		t.Errorf("got %+v", u)
	}
}

func TestPointers(t *testing.T) {
	f, err := Pointers("/meta/tokens~1in", "/meta/out/0", "")
	if err != nil {
		t.Fatal(err)
	}
	u := meter(f, "application/json", `{"meta":{"tokens/in":8,"out":[5,6]}}`, 1)
	if u.Input != 8 || u.Output != 5 || u.Total != 13 {
		t.Errorf("got %+v", u)
	}
	for _, bad := range []string{"usage", "/a~2b", "/" + strings.Repeat("k", 65)} {
		if _, err := Pointers(bad, "", ""); err == nil {
			t.Errorf("Pointers(%q): no error", bad)
		}
	}
	if _, err := Pointers("", "", ""); err == nil {
		t.Error("Pointers with none: no error")
	}
}

func FuzzMeter(f *testing.F) {
	for _, s := range []string{openAIJSON, anthropicJSON, openAISSE, anthropicSSE, responsesSSE} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, body string, sse bool) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		whole, split := meter(Auto, ct, body, 0), meter(Auto, ct, body, 3)
		if whole != split {
			t.Fatalf("whole %+v, in pieces %+v", whole, split)
		}
		if whole.Input < 0 || whole.Input > MaxCount || whole.Output < 0 || whole.Output > MaxCount || whole.Total < 0 || whole.Total > MaxCount {
			t.Fatalf("out of range: %+v", whole)
		}
		if !sse {
			checkAgainstJSON(t, body, whole)
		}
	})
}

// checkAgainstJSON holds the Meter's reading of a JSON body to
// encoding/json's: /usage/completion_tokens in plain digits is found, and
// anything else is not.
func checkAgainstJSON(t *testing.T, body string, _ Usage) {
	f, _ := Pointers("", "/usage/completion_tokens", "")
	u := meter(f, "application/json", body, 0)
	if depth(body) > maxDepth-2 {
		return // deeper than the Meter reads
	}
	var top map[string]json.RawMessage
	var usage map[string]json.RawMessage
	if !json.Valid([]byte(body)) || json.Unmarshal([]byte(body), &top) != nil {
		if u.HasOutput {
			t.Fatalf("usage %+v read from a body encoding/json refuses", u)
		}
		return
	}
	json.Unmarshal(top["usage"], &usage)
	raw := string(usage["completion_tokens"])
	want := len(raw) > 0 && strings.Trim(raw, "0123456789") == ""
	if want != u.HasOutput {
		t.Fatalf("completion_tokens %q: meter has %v (%+v)", raw, u.HasOutput, u)
	}
}

// depth is the deepest nesting of brackets in s, strings ignored roughly.
func depth(s string) int {
	d, most := 0, 0
	for _, c := range s {
		switch c {
		case '{', '[':
			d++
			most = max(most, d)
		case '}', ']':
			d--
		}
	}
	return most
}

// TestMeterRepeatedObject: an object given twice counts as its last copy,
// whole, as JSON decoders read it.
func TestMeterRepeatedObject(t *testing.T) {
	u := meter(OpenAI, "application/json", `{"usage":{"prompt_tokens":5,"completion_tokens":7},"usage":{"prompt_tokens":6}}`, 0)
	if u.Input != 6 || u.HasOutput {
		t.Errorf("got %+v, want input 6 and no output", u)
	}
}

// BenchmarkMeterStream meters a streamed answer of 200 output tokens (25
// events, then the usage): the work a gateway adds to one stream.
func BenchmarkMeterStream(b *testing.B) {
	var sb strings.Builder
	for range 25 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"tok tok tok tok tok tok tok tok "}}]}` + "\n\n")
	}
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":200,"total_tokens":300}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		m := NewMeter(Auto, "text/event-stream")
		for i := 0; i < len(body); i += 160 { // about one event a write
			m.Write(body[i:min(i+160, len(body))])
		}
		if m.Usage().Total != 300 {
			b.Fatal("no usage")
		}
	}
}

// BenchmarkParseRequest reads a chat request of a 2,000-byte prompt.
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","max_tokens":500,"stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 170) + `"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMeterReset: a reused Meter reads each answer as a new one would,
// in the format and Content-Type it was reset to, and media types match
// whatever their case and parameters.
func TestMeterReset(t *testing.T) {
	var m Meter
	m.Reset(OpenAI, "Text/Event-Stream ; charset=utf-8")
	io.WriteString(&m, openAISSE[:len(openAISSE)/2]) // cut: the next answer must not see it
	m.Reset(Anthropic, "text/event-stream")
	io.WriteString(&m, anthropicSSE)
	if u := m.Usage(); u.Input != 25 || u.Output != 15 {
		t.Errorf("after Reset: %+v, want 25 in, 15 out", u)
	}
	for ct, sse := range map[string]bool{"text/event-stream": true, "TEXT/EVENT-STREAM;charset=utf-8": true, " text/event-stream ": true,
		"application/json": false, "text/event-streams": false, "": false, "text/event-stream extra": false} {
		if got := isEventStream(ct); got != sse {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, sse)
		}
	}
}
