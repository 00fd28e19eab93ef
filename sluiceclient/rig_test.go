package sluiceclient

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// pipes is an in-memory network: a net.Listener whose connections are
// net.Pipe pairs dialled by Dial. Unlike loopback sockets, a goroutine
// blocked on it is durably blocked, so real http.Servers and Transports run
// on it inside a synctest bubble, on the bubble's fake clock.
type pipes struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipes() *pipes { return &pipes{conns: make(chan net.Conn), done: make(chan struct{})} }

func (p *pipes) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipes) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *pipes) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the listener.
func (p *pipes) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// serve runs handler in a real http.Server on an in-memory network and
// returns a transport dialling it; both are shut down when t ends.
func serve(t *testing.T, handler http.Handler) *http.Transport {
	t.Helper()
	p := newPipes()
	srv := &http.Server{Handler: handler}
	go srv.Serve(p)
	tr := &http.Transport{DialContext: p.Dial, MaxIdleConnsPerHost: 1000}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return tr
}

// limited returns handler behind sluice's httplimit middleware with one
// global limit, on a memstore closed when t ends.
func limited(t *testing.T, limit sluice.Limit, handler http.Handler) http.Handler {
	t.Helper()
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits: []httplimit.Limit{{Name: "global", Key: httplimit.Global, Limit: limit}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw(handler)
}

// hits records when a server saw each request.
type hits struct {
	mu    sync.Mutex
	times []time.Time
}

func (h *hits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.times = append(h.times, time.Now())
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (h *hits) all() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.times...)
}

// refuse answers every request with status and the given header fields.
func refuse(status int, header ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, "refused")
	})
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// newClient returns a Client over base, failing t on a config error.
func newClient(t *testing.T, base http.RoundTripper, cfg Config) *Client {
	t.Helper()
	cfg.Base = base
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get sends a GET through c and returns the status and body.
func get(t *testing.T, ctx context.Context, c http.RoundTripper) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://sluice.test/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), nil
}

// limitedUntil refuses every request before t with 429 and Retry-After: 1,
// and admits every request from t on.
func limitedUntil(t time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().Before(t) {
			refuse(429, "Retry-After", "1").ServeHTTP(w, r)
			return
		}
		ok200(w, r)
	})
}
