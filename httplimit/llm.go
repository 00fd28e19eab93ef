package httplimit

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
)

// reserveBody reads the body of r, at most n bytes, for the checks that
// reserve what an LLM request asks for (decide.Reserve), and puts it back
// for the handler, intact. The request no longer asks for a compressed
// answer: the answer's usage is read as it goes by. A body larger than n
// is a *decide.ClientError answered with 413, one that cannot be read or
// parsed one answered with 400.
func reserveBody(r *http.Request, checks []decide.Check, n int64) error {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := readBody(r, n)
		if err != nil {
			return &decide.ClientError{Field: "body", Reason: fmt.Sprintf("could not be read: %v", err)}
		}
		if int64(len(b)) > n {
			return &decide.ClientError{Status: http.StatusRequestEntityTooLarge, Field: "body",
				Reason: fmt.Sprintf("longer than %d bytes, the most a token limit reads", n)}
		}
		body = b
		r.Body = readCloser{bytes.NewReader(b), r.Body}
	}
	r.Header.Del("Accept-Encoding")
	return decide.Reserve(checks, body)
}

// readBody reads r's body, at most n+1 bytes: in one buffer of its
// Content-Length when it has one (no copy as the buffer grows), else as
// io.ReadAll does.
func readBody(r *http.Request, n int64) ([]byte, error) {
	if r.ContentLength <= 0 || r.ContentLength > n {
		return io.ReadAll(io.LimitReader(r.Body, n+1))
	}
	b := make([]byte, r.ContentLength+1) // one more: a body longer than it said is an error
	k, err := io.ReadFull(r.Body, b)
	switch {
	case int64(k) == r.ContentLength:
		return b[:k], nil
	case err == nil:
		return nil, fmt.Errorf("longer than its Content-Length %d", r.ContentLength)
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return nil, fmt.Errorf("shorter than its Content-Length %d", r.ContentLength)
	}
	return nil, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// meters read the usage of an LLM answer as it is written, one Meter per
// format the checks read.
type meters struct {
	formats    []*llmusage.Format
	m          []*llmusage.Meter
	unreadable bool // the answer is compressed: its usage cannot be read
}

// newMeters returns the meters of res's checks that settle tokens, nil
// when none does.
func newMeters(res *decide.Result) *meters {
	var ms *meters
	add := func(cs []decide.Check) {
		for i := range cs {
			lc := cs[i].Late
			if lc == nil || lc.Tokens == nil {
				continue
			}
			if ms == nil {
				ms = &meters{}
			}
			f := lc.Tokens.Format
			if f == nil {
				f = llmusage.Auto
			}
			if !contains(ms.formats, f) {
				ms.formats = append(ms.formats, f)
			}
		}
	}
	add(res.Enforced)
	add(res.Shadow)
	return ms
}

func contains(fs []*llmusage.Format, f *llmusage.Format) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// start makes the meters for an answer with headers h.
func (ms *meters) start(h http.Header) {
	if ce := h.Get("Content-Encoding"); ce != "" && ce != "identity" {
		ms.unreadable = true
		return
	}
	ct := h.Get("Content-Type")
	for _, f := range ms.formats {
		m := meterPool.Get().(*llmusage.Meter)
		m.Reset(f, ct)
		ms.m = append(ms.m, m)
	}
}

// meterPool recycles the meters of answers settled (about 3 KB each).
var meterPool = sync.Pool{New: func() any { return new(llmusage.Meter) }}

// release gives the meters back once the answer is settled.
func (ms *meters) release() {
	for i, m := range ms.m {
		meterPool.Put(m)
		ms.m[i] = nil
	}
	ms.m = ms.m[:0]
}

// write feeds p to the meters.
func (ms *meters) write(p []byte) {
	for _, m := range ms.m {
		m.Write(p)
	}
}

// usage returns what the answer reported in format f; nil when it could
// not be read.
func (ms *meters) usage(f *llmusage.Format) *llmusage.Usage {
	if ms.unreadable {
		return nil
	}
	for i, g := range ms.formats {
		if g == f && i < len(ms.m) {
			u := ms.m[i].Usage()
			return &u
		}
	}
	return &llmusage.Usage{} // nothing was written: a stream without usage
}
