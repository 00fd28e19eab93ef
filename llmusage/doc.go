// Package llmusage reads what an LLM call costs out of its HTTP bodies as
// they stream by: the usage an answer reports (Meter) and what a request
// asks for (ParseRequest), so that a rate limit can reserve a call's
// tokens before it runs and settle what it used after (see package
// decide's TokenCost, and docs/llm.md).
//
// A Meter is an io.Writer fed the answer's body as it is forwarded: it
// never holds the body, only the path to the value being read and the
// first bytes of one scalar (about 3 KB in all, whatever the answer),
// so it adds no time before the first byte and no memory per byte. It
// reads OpenAI's Chat Completions and Responses usage, Anthropic's
// Messages usage, in JSON answers and in server-sent event streams, or
// the JSON pointers of another API (Pointers). A well-formed JSON
// document (the body, or one event's data) is the only place usage counts
// from: text that looks like usage inside a string, an SSE comment, a cut
// event or a body that is not JSON counts nothing. What a stream did carry
// as text (Usage.Text) is what an answer that reports no usage is
// estimated from.
//
// The package has no dependency on the rest of sluice: a service that
// calls an LLM API itself can meter the answer with it directly.
package llmusage
