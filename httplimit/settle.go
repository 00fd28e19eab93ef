package httplimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/httpname"
)

// costWriter watches the response of a request whose cost is known only
// after it (decide.LateCost): it reads the cost header when the handler
// sends its headers and the trailer when the handler returns, and strips
// them from the response when the LateCost says so. It keeps
// http.Flusher, io.ReaderFrom, http.Hijacker when the underlying writer
// has it (watch), and, through Unwrap, every other method
// http.ResponseController finds.
type costWriter struct {
	http.ResponseWriter
	res       *decide.Result
	names     []string            // the headers that report costs
	strip     []string            // those of names to remove from the response
	sent      map[string][]string // their values when the headers were sent
	announced []string            // those of names announced as trailers
	wrote     bool
	meters    *meters // the usage of an LLM answer, when a check reads it
	status    int     // the response's status, once sent (0: not yet; a handler that writes none sends 200)
	hijacked  bool    // the handler took the connection: its status is unknown
}

// newCostWriter returns w watched for the late costs of res.
func newCostWriter(w http.ResponseWriter, res *decide.Result) *costWriter {
	cw := &costWriter{ResponseWriter: w, res: res}
	add := func(cs []decide.Check) {
		for i := range cs {
			lc := cs[i].Late
			if lc == nil || lc.Header == "" || slices.Contains(cw.names, lc.Header) {
				continue
			}
			cw.names = append(cw.names, lc.Header)
			if lc.Strip {
				cw.strip = append(cw.strip, lc.Header)
			}
		}
	}
	add(res.Enforced)
	add(res.Shadow)
	cw.meters = newMeters(res)
	return cw
}

// capture records the cost headers as they are sent, and the trailers
// announced for them, and strips those it should.
func (cw *costWriter) capture() {
	if cw.wrote {
		return
	}
	cw.wrote = true
	h := cw.ResponseWriter.Header()
	if cw.meters != nil {
		cw.meters.start(h)
	}
	cw.sent = make(map[string][]string, len(cw.names))
	for _, name := range cw.names {
		if vs := h[name]; len(vs) > 0 {
			cw.sent[name] = slices.Clone(vs)
		}
		if announces(h, name) {
			cw.announced = append(cw.announced, name)
		}
	}
	for _, name := range cw.strip {
		delete(h, name)
		unannounce(h, name)
	}
}

// announces reports whether the Trailer header of h names name.
func announces(h http.Header, name string) bool {
	for _, v := range h["Trailer"] {
		for t := range strings.SplitSeq(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(t)) == name {
				return true
			}
		}
	}
	return false
}

// unannounce removes name from the Trailer header of h.
func unannounce(h http.Header, name string) {
	vs := h["Trailer"]
	if len(vs) == 0 {
		return
	}
	var kept []string
	for _, v := range vs {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && http.CanonicalHeaderKey(t) != name {
				kept = append(kept, t)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Trailer")
		return
	}
	h["Trailer"] = []string{strings.Join(kept, ", ")}
}

// finish reads the trailers once the handler has returned, strips those it
// should, and returns the values of each cost header: the trailer's if the
// response has one, else the header's as sent.
func (cw *costWriter) finish() func(name string) []string {
	cw.capture() // a handler that wrote nothing: its headers go out now
	h := cw.ResponseWriter.Header()
	trailers := map[string][]string{}
	for _, name := range cw.names {
		if vs := h[http.TrailerPrefix+name]; len(vs) > 0 {
			trailers[name] = slices.Clone(vs)
		} else if vs := h[name]; len(vs) > 0 && slices.Contains(cw.announced, name) {
			trailers[name] = slices.Clone(vs)
		}
	}
	for _, name := range cw.strip {
		delete(h, http.TrailerPrefix+name)
		if slices.Contains(cw.announced, name) {
			delete(h, name)
		}
	}
	return func(name string) []string {
		if vs, ok := trailers[name]; ok {
			return vs
		}
		return cw.sent[name]
	}
}

// settle settles res from the response, once the handler has returned,
// and tells hook (if set) what it settled. The client may have gone: the
// settle outlives its request.
func (cw *costWriter) settle(r *http.Request, hook func(*http.Request, decide.Settled)) {
	var buf [4]decide.Settled
	resp := decide.Response{Status: cw.status, HasStatus: !cw.hijacked, Values: cw.finish()}
	if resp.Status == 0 {
		resp.Status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	if cw.meters != nil {
		resp.Usage = cw.meters.usage
	}
	settled := cw.res.SettleResponse(context.WithoutCancel(r.Context()), resp, buf[:0])
	if cw.meters != nil {
		cw.meters.release()
	}
	if hook != nil {
		for _, s := range settled {
			hook(r, s)
		}
	}
}

// WriteHeader captures the cost headers with the final status (an
// informational 1xx sends headers that are not the response's).
func (cw *costWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		cw.capture()
		if cw.status == 0 {
			cw.status = code
		}
	}
	cw.ResponseWriter.WriteHeader(code)
}

func (cw *costWriter) Write(b []byte) (int, error) {
	cw.capture()
	n, err := cw.ResponseWriter.Write(b)
	if cw.meters != nil {
		cw.meters.write(b[:n]) // what the client was sent
	}
	return n, err
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (sendfile), unless
// the answer's usage is read as it goes by.
func (cw *costWriter) ReadFrom(r io.Reader) (int64, error) {
	cw.capture()
	if cw.meters != nil {
		return io.Copy(cw.ResponseWriter, io.TeeReader(r, meterWriter{cw.meters}))
	}
	return io.Copy(cw.ResponseWriter, r)
}

type meterWriter struct{ ms *meters }

func (w meterWriter) Write(p []byte) (int, error) { w.ms.write(p); return len(p), nil }

// Flush sends the headers and what was written so far, if the underlying
// writer can.
func (cw *costWriter) Flush() {
	cw.capture()
	http.NewResponseController(cw.ResponseWriter).Flush()
}

// FlushError is Flush reporting whether the underlying writer could.
func (cw *costWriter) FlushError() error {
	cw.capture()
	return http.NewResponseController(cw.ResponseWriter).Flush()
}

// costHijacker is a costWriter over a writer that is an http.Hijacker
// (HTTP/1.x), so that a handler that asks w.(http.Hijacker) gets the
// answer it would get without the middleware.
type costHijacker struct{ *costWriter }

// Hijack hands the connection over. The cost header is read as the
// hijacker found it (it may still send it, in a 101).
func (ch costHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	ch.capture()
	ch.hijacked = true
	return http.NewResponseController(ch.ResponseWriter).Hijack()
}

// watch returns cw as the handler's writer: with Hijack when the
// underlying writer has it.
func (cw *costWriter) watch() http.ResponseWriter {
	if _, ok := cw.ResponseWriter.(http.Hijacker); ok {
		return costHijacker{cw}
	}
	return cw
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (cw *costWriter) Unwrap() http.ResponseWriter { return cw.ResponseWriter }

// checkLate reports a Limit whose Late or Reserve cannot work.
func checkLate(l Limit) error {
	if l.Late != nil && l.Late.Tokens == nil && !httpname.Valid(l.Late.Header) && (l.Late.Header != "" || l.Late.When == nil) {
		return fmt.Errorf("Late.Header %q is not a header name", l.Late.Header)
	}
	return l.Late.Check(l.Reserve, l.Limit)
}
