// Package listen binds sluice serve's listeners and bounds what a client
// can hold: a connection cap per listener, timeouts, the size of a
// request's header (a 431 problem document), HTTP/2 in clear refused, a
// guard against HTTP/2 stream-reset floods, and TLS with certificates
// read again when they change.
package listen

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/problem"
)

// Limits are a listener's bounds.
type Limits struct {
	ReadHeader, Read, Idle time.Duration
	MaxConns               int // 0: no bound
	MaxHeader              int // bytes of a request's line and header fields
}

// Listen binds the listener called name with its connection cap; refused
// is called for each connection refused at the cap. plainHTTP says that an
// HTTP/1 answer (503) may be written to a refused connection.
func Listen(name, addr string, lim Limits, plainHTTP bool, refused func()) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || lim.MaxConns <= 0 {
		return ln, err
	}
	return &capListener{Listener: ln, slots: make(chan struct{}, lim.MaxConns), plainHTTP: plainHTTP, refused: refused}, nil
}

// capListener holds at most cap(slots) connections open. Past that it
// accepts a new connection only to refuse it at once: the kernel's backlog
// would otherwise keep the client waiting without an answer, and a file
// descriptor is spent only for the moment of the refusal.
type capListener struct {
	net.Listener
	slots     chan struct{}
	plainHTTP bool
	refused   func()
}

// refusal is what a refused connection of an HTTP listener reads.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 37\r\n\r\nsluice: too many connections; retry.\n"

// Accept returns the next connection within the cap.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: c, slots: l.slots}, nil
		default:
		}
		if l.plainHTTP {
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			c.Write([]byte(refusal))
		}
		c.Close()
		if l.refused != nil {
			l.refused()
		}
	}
}

// capConn gives its slot back when closed.
type capConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

// HTTPServer is the http.Server of an HTTP listener. tooLarge is called
// for each request refused for the size of its header (see headerLimit).
func HTTPServer(h http.Handler, lim Limits, log *slog.Logger, tooLarge func()) *http.Server {
	return &http.Server{
		Handler:           headerLimit(rejectPreface(h), lim.MaxHeader, tooLarge),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    headerCeiling(lim.MaxHeader),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// A request whose line and header fields exceed max_header_bytes is
// answered 431 with a problem document, and counted, whichever layer sees
// it first:
//
//   - net/http reads a header up to headerCeiling, a quarter over (and
//     HTTP/2 announces that much in SETTINGS_MAX_HEADER_LIST_SIZE), so
//     that a request somewhat over the setting reaches headerLimit, which
//     measures it and answers;
//   - past the ceiling net/http stops reading (memory stays bounded) and
//     writes a text/plain 431 to the connection itself, before any
//     handler runs; on a listener in clear, tooLargeConn recognises that
//     answer and writes the problem document instead. Under TLS, and for
//     HTTP/2 clients that ignore the announced limit, net/http's own 431
//     goes out, uncounted.

// headerCeiling is the http.Server.MaxHeaderBytes for a setting of n: the
// headroom lets a request somewhat over n reach headerLimit, at a quarter
// more memory per connection reading a header.
func headerCeiling(n int) int { return n + n/4 }

// headerLimit answers 431 to a request whose line and header fields, as
// HTTP/1.1 writes them, are more than n bytes.
func headerLimit(next http.Handler, n int, tooLarge func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerSize(r) > n {
			tooLarge()
			w.Header().Set("Connection", "close")
			problem.Write(w, http.StatusRequestHeaderFieldsTooLarge, tooLargeTitle, tooLargeDetail(n), nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

const tooLargeTitle = "Request Header Fields Too Large"

func tooLargeDetail(n int) string {
	return fmt.Sprintf("The request line and header fields exceed %d bytes.", n)
}

// headerSize is the size of r's request line and header fields as
// HTTP/1.1 writes them ("Name: value\r\n" each, the Host field too).
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: \r\n") + len(r.Host) + 2 // and the blank line
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// tooLargeListener gives its connections a tooLargeConn.
type tooLargeListener struct {
	net.Listener
	answer   []byte
	tooLarge func()
}

// NewTooLargeListener wraps ln, a listener in clear whose server has a
// setting of n header bytes.
func NewTooLargeListener(ln net.Listener, n int, tooLarge func()) net.Listener {
	body := problem.Body(http.StatusRequestHeaderFieldsTooLarge, tooLargeTitle, tooLargeDetail(n), nil)
	answer := fmt.Appendf(nil, "HTTP/1.1 431 %s\r\nContent-Type: application/problem+json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		tooLargeTitle, len(body), body)
	return &tooLargeListener{Listener: ln, answer: answer, tooLarge: tooLarge}
}

func (l *tooLargeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tooLargeConn{Conn: c, l: l}, nil
}

// netHTTP431 is what net/http writes to a connection whose header passes
// MaxHeaderBytes (net/http's server.go), in one Write. A handler's
// answer never equals it: net/http adds a Date field to those.
const netHTTP431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"

// tooLargeConn replaces net/http's text/plain 431 with the problem
// document, and counts it.
type tooLargeConn struct {
	net.Conn
	l *tooLargeListener
}

func (c *tooLargeConn) Write(p []byte) (int, error) {
	if len(p) != len(netHTTP431) || string(p) != netHTTP431 {
		return c.Conn.Write(p)
	}
	c.l.tooLarge()
	if _, err := c.Conn.Write(c.l.answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// rejectPreface answers 505 to the HTTP/2 connection preface sent in
// clear ("PRI * HTTP/2.0"): net/http hands it to the handler, for servers
// that upgrade such connections themselves, and sluice does not; without
// this the gateway forwarded it upstream as a request.
func rejectPreface(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PRI" && r.ProtoMajor == 2 && r.TLS == nil {
			w.Header().Set("Connection", "close")
			http.Error(w, "sluice: HTTP/2 without TLS (h2c) is not served here", http.StatusHTTPVersionNotSupported)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fdReserve is what the process needs besides its listeners' connections:
// the store's connections, config files, the listeners themselves.
const fdReserve = 256

// WarnFileLimit logs when the connection caps of the listeners that are on
// (caps, by listener; 0 or less: no cap) add up to more file descriptors
// than the process may open: past that limit accept fails for every
// listener, admin's too, before any cap refuses.
func WarnFileLimit(log *slog.Logger, caps map[string]int) {
	limit := openFileLimit()
	if limit == 0 {
		return
	}
	var need uint64 = fdReserve
	for name, n := range caps {
		if n <= 0 {
			log.Warn("a listener has no connection cap: enough clients exhaust the process's file descriptors", "listener", name, "limit", limit)
			continue
		}
		per := uint64(1)
		if name == "gateway" {
			per = 2 // the client's connection and the upstream's
		}
		need += per * uint64(n)
	}
	if need > limit {
		log.Warn("the connection caps add up to more file descriptors than the process may open; lower max_conns or raise the limit (ulimit -n)", "needed", need, "limit", limit)
	}
}
