// Package llmlimit holds the LLM API calls a Go service makes itself to
// token budgets: an http.RoundTripper that reserves what each call asks
// for, makes the call, and settles what the answer reports once its body
// has been read (or closed), through package decide's one decision path.
//
//	client := &http.Client{Transport: llmlimit.New(limiter, llmlimit.Config{Limits: ...})}
//
// It is the client-side twin of the gateway and httplimit (which hold the
// calls of others to a budget): the same reservation (decide.Reserve), the
// same reading of the answer (llmusage.Meter), the same settle
// (decide.Result.SettleResponse), the same over-spend bound (docs/llm.md).
package llmlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
)

// Limit is one budget the calls are held to.
type Limit struct {
	// Name identifies the limit (printable ASCII, unique).
	Name string
	// Key returns the key a call is counted under ("tenant:acme"), for
	// example from a value the caller put in the request's context; ""
	// leaves the call out of this limit.
	Key func(r *http.Request) (string, error)
	// Limit is the budget: sluice.CalendarWindow(10000, sluice.Day, "UTC").
	Limit sluice.Limit
	// Tokens says what is counted and how calls are reserved; its zero
	// value counts total tokens of OpenAI's or Anthropic's answers. The
	// answers are read in the first limit's Tokens.Format.
	Tokens decide.TokenCost
	// Max bounds what one call is charged; 0: the limit's capacity.
	Max int64
}

// Config configures a Transport.
type Config struct {
	// Base makes the calls. Default http.DefaultTransport.
	Base http.RoundTripper
	// Limits are checked together for every call, all or nothing.
	Limits []Limit
	// OnError is what happens to a call when the store fails: FailOpen
	// (the default) makes it uncounted, FailClosed refuses it.
	OnError sluice.FailureMode
	// Logger receives the logs. Default slog.Default().
	Logger *slog.Logger
	// Settled, if set, is called with each settle, once the answer's body
	// has been read or closed. It must be safe for concurrent use.
	Settled func(decide.Settled)
}

// Transport is an http.RoundTripper that holds calls to token budgets.
// It is safe for concurrent use.
type Transport struct {
	base   http.RoundTripper
	limits []Limit
	lates  []decide.LateCost
	dc     *decide.Decider
	hook   func(decide.Settled)
}

var _ http.RoundTripper = (*Transport)(nil)

// RefusedError is the error of a call a budget refused: it was not made.
type RefusedError struct {
	// Limit names the limit that refused.
	Limit string
	// RetryAfter is when the budget has room again.
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("llmlimit: limit %q refused the call; retry in %s", e.Limit, e.RetryAfter)
}

// New returns a Transport charging limiter.
func New(limiter *sluice.Limiter, cfg Config) (*Transport, error) {
	if len(cfg.Limits) == 0 {
		return nil, errors.New("llmlimit: New: no limits")
	}
	t := &Transport{base: cfg.Base, limits: cfg.Limits, hook: cfg.Settled}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	for i, l := range cfg.Limits {
		lc := decide.LateCost{Tokens: &cfg.Limits[i].Tokens, Max: l.Max}
		switch {
		case l.Name == "" || l.Key == nil:
			return nil, fmt.Errorf("llmlimit: limit %d: Name and Key are required", i)
		case l.Limit.Validate() != nil:
			return nil, fmt.Errorf("llmlimit: limit %q: %w", l.Name, l.Limit.Validate())
		}
		if err := lc.Check(0, l.Limit); err != nil {
			return nil, fmt.Errorf("llmlimit: limit %q: %w", l.Name, err)
		}
		t.lates = append(t.lates, lc)
	}
	dc, err := decide.New(limiter, decide.Config{OnError: cfg.OnError, Component: "llmlimit", Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("llmlimit: %w", err)
	}
	t.dc = dc
	return t, nil
}

// RoundTrip reserves what r asks for under every limit, makes the call if
// they all admit it, and settles when the answer's body is read to its
// end or closed. A refused call is a *RefusedError; a body that is not an
// LLM request (not JSON, a maximum that is not a whole number from 1) a
// *decide.ClientError; neither is sent. r is not modified.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	checks := t.plan(r)
	out, err := t.reserve(r, checks)
	if err != nil {
		return nil, err
	}
	res := &decide.Result{}
	t.dc.Run(r.Context(), checks, res)
	if err := refusal(res); err != nil {
		res.Release()
		return nil, err
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		t.settle(res, &llmusage.Usage{}) // what the prompt was estimated at
		return nil, err
	}
	resp.Body = &meteredBody{body: resp.Body, t: t, res: res, meter: llmusage.NewMeter(t.format(), resp.Header.Get("Content-Type")),
		unreadable: resp.Header.Get("Content-Encoding") != "" && !resp.Uncompressed}
	return resp, nil
}

// plan builds the checks of r.
func (t *Transport) plan(r *http.Request) []decide.Check {
	checks := make([]decide.Check, 0, len(t.limits))
	for i, l := range t.limits {
		key, err := l.Key(r)
		switch {
		case err != nil:
			checks = append(checks, decide.Check{Name: l.Name, Limit: l.Limit, Err: fmt.Errorf("key: %w", err)})
		case key != "":
			checks = append(checks, decide.Check{Name: l.Name, Key: string(decide.AppendKey(nil, l.Name, key)), Limit: l.Limit, Cost: 1, Late: &t.lates[i]})
		}
	}
	return checks
}

// reserve reads r's body, reserves what it asks for, and returns the
// request to send: r with the body put back and no Accept-Encoding (the
// base transport then asks for and undoes its own compression).
func (t *Transport) reserve(r *http.Request, checks []decide.Check) (*http.Request, error) {
	n := decide.BodyBytes(checks)
	if n == 0 {
		return r, nil
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, n+1))
		r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("llmlimit: reading the request body: %w", err)
		}
		if int64(len(b)) > n {
			return nil, &decide.ClientError{Status: http.StatusRequestEntityTooLarge, Field: "body", Reason: fmt.Sprintf("longer than %d bytes, the most a token limit reads", n)}
		}
		body = b
	}
	if err := decide.Reserve(checks, body); err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	out.Header.Del("Accept-Encoding")
	return out, nil
}

// refusal is the error of a call res does not let through, nil when it
// does.
func refusal(res *decide.Result) error {
	switch res.Outcome {
	case decide.Refused:
		return &RefusedError{Limit: res.DecidedBy().Name, RetryAfter: res.RetryAfter()}
	case decide.Invalid, decide.Failed:
		return res.Err
	}
	return nil
}

// format is the format of the limits' answers: the first one's.
func (t *Transport) format() *llmusage.Format {
	if f := t.limits[0].Tokens.Format; f != nil {
		return f
	}
	return llmusage.Auto
}

// settle settles res from u (nil: the answer could not be read).
func (t *Transport) settle(res *decide.Result, u *llmusage.Usage) {
	var buf [4]decide.Settled
	settled := res.SettleResponse(context.Background(), decide.Response{Usage: func(*llmusage.Format) *llmusage.Usage { return u }}, buf[:0])
	if t.hook != nil {
		for _, s := range settled {
			t.hook(s)
		}
	}
	res.Release()
}

// meteredBody is an answer's body: what is read goes through the meter,
// and the end (EOF or Close) settles, once.
type meteredBody struct {
	body       io.ReadCloser
	t          *Transport
	res        *decide.Result
	meter      *llmusage.Meter
	unreadable bool
	once       sync.Once
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.meter.Write(p[:n])
	if err == io.EOF {
		b.done()
	}
	return n, err
}

func (b *meteredBody) Close() error {
	err := b.body.Close()
	b.done()
	return err
}

func (b *meteredBody) done() {
	b.once.Do(func() {
		u := b.meter.Usage()
		if b.unreadable {
			b.t.settle(b.res, nil)
			return
		}
		b.t.settle(b.res, &u)
	})
}
