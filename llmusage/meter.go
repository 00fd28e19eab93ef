package llmusage

import (
	"strconv"
	"strings"
)

// MaxCount bounds every count a Meter reports: a larger number in an
// answer reads as MaxCount (2^50; costs add up as doubles in Redis's Lua,
// exact to 2^53).
const MaxCount = 1 << 50

// Usage is what an answer reported, as a Meter read it.
type Usage struct {
	// Input, Output and Total are the tokens reported for each measure,
	// valid when the matching Has field is set. Total is the sum of Input
	// and Output when the answer reports no total but both of them.
	Input, Output, Total          int64
	HasInput, HasOutput, HasTotal bool
	// Text is the number of bytes of generated text the answer carried
	// (message content, text deltas, tool call arguments, as sent): what
	// an estimate of its output tokens is made from when it reports none.
	Text int64
}

// Tokens returns the tokens u reports for m. estimated is true when u
// has no such count: then input is promptTokens (the request's estimate),
// output is Text over charsPerToken (rounded up), and total their sum with
// whatever part u does report.
func (u Usage) Tokens(m Measure, promptTokens, charsPerToken int64) (n int64, estimated bool) {
	in, inEst := u.Input, !u.HasInput
	if inEst {
		in = promptTokens
	}
	out, outEst := u.Output, !u.HasOutput
	if outEst {
		out = EstimateTokens(u.Text, charsPerToken)
	}
	switch m {
	case Input:
		return in, inEst
	case Output:
		return out, outEst
	}
	if u.HasTotal {
		return u.Total, false
	}
	return min(in+out, MaxCount), inEst || outEst
}

// EstimateTokens is the tokens of n bytes of text at charsPerToken bytes a
// token (4 when it is not positive), rounded up.
func EstimateTokens(n, charsPerToken int64) int64 {
	if charsPerToken <= 0 {
		charsPerToken = 4
	}
	return min(MaxCount, (max(n, 0)+charsPerToken-1)/charsPerToken)
}

// Meter reads the usage out of an answer as it streams by: write the
// body's bytes to it, in pieces of any size, then call Usage. A Meter
// holds a fixed amount of memory (about 3 KB) whatever it is fed,
// and never fails: what it cannot read it ignores.
//
// The body is read as server-sent events when the answer's Content-Type
// is text/event-stream (each event's data one JSON document; comments,
// other fields and events cut before their blank line count nothing),
// else as one JSON document. Usage counts only from a complete,
// well-formed document: a body cut in the middle, or an event that is not
// JSON ("[DONE]"), reports none. A Meter is not safe for concurrent use.
type Meter struct {
	f      *Format
	sse    bool
	sc     scanner
	staged [maxFields]int64 // the values of the current document, -1: unset, -2: invalid
	values [maxFields]int64 // those of complete documents
	text   int64

	line    lineState
	name    [8]byte // an SSE field's name
	nameN   int
	hasData bool // the current event has a data line
	cr      bool // the last byte was a CR
}

type lineState uint8

const (
	lineStart lineState = iota
	lineName            // reading a field's name
	lineSpace           // after "data:", an optional space
	lineData            // in a data field's value
	lineSkip            // in a comment or another field
)

// NewMeter returns a Meter for an answer in format f (Auto if nil) with
// the given Content-Type.
func NewMeter(f *Format, contentType string) *Meter {
	m := new(Meter)
	m.Reset(f, contentType)
	return m
}

// Reset makes m a new Meter for an answer in format f (Auto if nil) with
// the given Content-Type, forgetting what it was fed: a caller that
// meters many answers can reuse its Meters (a sync.Pool) rather than
// allocate one per answer.
func (m *Meter) Reset(f *Format, contentType string) {
	if f == nil {
		f = Auto
	}
	*m = Meter{f: f, sse: isEventStream(contentType)}
	m.sc.v = m
	for i := range m.values {
		m.values[i], m.staged[i] = -1, -1
	}
}

// isEventStream reports whether the media type of contentType is
// text/event-stream (in any case, with or without parameters), without
// mime.ParseMediaType's map of the parameters.
func isEventStream(contentType string) bool {
	const sse = "text/event-stream"
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), sse)
}

// Write feeds p to m. It never fails.
func (m *Meter) Write(p []byte) (int, error) {
	if !m.sse {
		m.sc.write(p)
		return len(p), nil
	}
	for i := 0; i < len(p); i++ {
		if m.line == lineData { // the rest of the line goes to the scanner at once
			j := i
			for j < len(p) && p[j] != '\n' && p[j] != '\r' {
				j++
			}
			if j > i {
				m.sc.write(p[i:j])
				m.cr = false
			}
			if i = j; i == len(p) {
				break
			}
		}
		m.sseByte(p[i])
	}
	return len(p), nil
}

// Usage returns what the answer fed so far reported.
func (m *Meter) Usage() Usage {
	if !m.sse {
		m.commit() // only a complete document counts
	}
	u := Usage{Text: m.text}
	for i, fl := range m.f.fields {
		v := m.values[i]
		switch {
		case v == -2:
			m.invalid(&u, fl.measure)
		case v >= 0:
			m.add(&u, fl.measure, v)
		}
	}
	if !u.HasTotal && u.HasInput && u.HasOutput {
		u.Total, u.HasTotal = min(u.Input+u.Output, MaxCount), true
	}
	return u
}

// add counts v toward measure ms, unless an invalid value made it unknown.
func (m *Meter) add(u *Usage, ms Measure, v int64) {
	switch ms {
	case Input:
		if m.isInvalid(Input) {
			return
		}
		u.Input, u.HasInput = min(u.Input+v, MaxCount), true
	case Output:
		if m.isInvalid(Output) {
			return
		}
		u.Output, u.HasOutput = min(u.Output+v, MaxCount), true
	default:
		if m.isInvalid(Total) {
			return
		}
		u.Total, u.HasTotal = min(u.Total+v, MaxCount), true
	}
}

// invalid makes measure ms unknown: one of its numbers was not a count.
func (m *Meter) invalid(u *Usage, ms Measure) {
	switch ms {
	case Input:
		u.Input, u.HasInput = 0, false
	case Output:
		u.Output, u.HasOutput = 0, false
	default:
		u.Total, u.HasTotal = 0, false
	}
}

func (m *Meter) isInvalid(ms Measure) bool {
	for i, fl := range m.f.fields {
		if fl.measure == ms && m.values[i] == -2 {
			return true
		}
	}
	return false
}

// commit keeps the staged values of a complete document, and forgets
// those of any other.
func (m *Meter) commit() {
	ok := m.sc.complete()
	for i := range m.staged {
		if ok && m.staged[i] != -1 {
			m.values[i] = m.staged[i]
		}
		m.staged[i] = -1
	}
}

// visit records a value at a usage path, and counts generated text.
func (m *Meter) visit(s *scanner, k valueKind, text []byte, raw int64) {
	if k == kString {
		if isTextKey(s.lastKey()) {
			m.text = min(m.text+raw, MaxCount)
		}
		return
	}
	for i, fl := range m.f.fields {
		for _, p := range fl.paths {
			if p.at(s) {
				m.staged[i] = count(k, text, s.over)
			}
		}
	}
}

// keyed forgets what the current document staged under a key given again
// ({"usage": {...}, "usage": {...}}): as JSON decoders do, the last value
// of a key is the one that counts, whole.
func (m *Meter) keyed(s *scanner) {
	if !m.f.inner(s.lastKey()) {
		return // most keys: none of the paths goes through them
	}
	for i, fl := range m.f.fields {
		for _, p := range fl.paths {
			if len(p) > s.depth && p.under(s) {
				m.staged[i] = -1
			}
		}
	}
}

// count reads a token count: a whole number in plain digits (MaxCount
// when larger); -2 for anything else (negative, fractional, not a number).
func count(k valueKind, text []byte, over bool) int64 {
	if k != kNumber || len(text) == 0 {
		return -2
	}
	for _, c := range text {
		if c < '0' || c > '9' {
			return -2
		}
	}
	if over || len(text) > 16 {
		return MaxCount
	}
	n, _ := strconv.ParseInt(string(text), 10, 64)
	return min(n, MaxCount)
}

// isTextKey reports whether a string under key k is generated text.
func isTextKey(k []byte) bool {
	switch string(k) {
	case "content", "text", "arguments", "partial_json", "thinking", "delta", "refusal", "reasoning_content":
		return true
	}
	return false
}

// sseByte reads one byte of an event stream.
func (m *Meter) sseByte(c byte) {
	if c == '\n' && m.cr {
		m.cr = false
		return // the LF of a CRLF
	}
	m.cr = c == '\r'
	if c == '\r' || c == '\n' {
		m.endLine()
		return
	}
	switch m.line {
	case lineStart:
		if c == ':' {
			m.line = lineSkip
			return
		}
		m.line, m.nameN = lineName, 0
		m.nameByte(c)
	case lineName:
		m.nameByte(c)
	case lineSpace:
		m.line = lineData
		if c != ' ' {
			m.sc.step(c)
		}
	case lineData:
		m.sc.step(c)
	}
}

// nameByte reads a byte of a field's name; the colon ends it.
func (m *Meter) nameByte(c byte) {
	if c != ':' {
		if m.nameN < len(m.name) {
			m.name[m.nameN] = c
		}
		m.nameN++
		return
	}
	if !m.isData() {
		m.line = lineSkip
		return
	}
	m.startData()
	m.line = lineSpace
}

func (m *Meter) isData() bool { return m.nameN == 4 && string(m.name[:4]) == "data" }

// startData begins a data line: the lines of one event's data are joined
// by a newline.
func (m *Meter) startData() {
	if m.hasData {
		m.sc.step('\n')
	}
	m.hasData = true
}

// endLine ends a line; an empty one dispatches the event.
func (m *Meter) endLine() {
	switch m.line {
	case lineStart:
		if m.hasData {
			m.commit()
		}
		m.sc.reset()
		m.hasData = false
	case lineName:
		if m.isData() { // "data" alone: an empty data line
			m.startData()
		}
	}
	m.line = lineStart
}
