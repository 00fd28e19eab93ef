// Package grpclimit is sluice's gRPC server middleware: unary and stream
// interceptors that check every call against a set of limits (per method,
// per metadata value, per peer address, global) in one all-or-nothing sluice
// Check, and refuse with RESOURCE_EXHAUSTED carrying a RetryInfo detail that
// says when to retry.
//
// It is a thin adapter over package decide, the decision path every sluice
// front-end shares. A limit whose cost is known only after the call
// (Limit.Late) is settled from the header or trailer metadata the handler
// sets, once it returns.
//
// Interceptors of several Configs chain (grpc.ChainUnaryInterceptor,
// grpc.ChainStreamInterceptor) as one: a call one of them refuses is
// charged by none, the one that refuses giving back what those before it
// charged (see decide.Stack).
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/jwtclaims"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limit is one limit the interceptors apply to each call.
type Limit struct {
	// Name identifies the limit in refusals ("per-tenant").
	Name string
	// Key returns the key a call is counted under; an empty key skips this
	// limit for the call.
	Key KeyFunc
	// Limit is the algorithm and its parameters.
	Limit sluice.Limit
	// Late, if set, takes the call's cost from its response: the call
	// reserves Reserve when it is decided, and the header or trailer
	// metadata key Late.Header the handler sets (grpc.SetHeader,
	// grpc.SetTrailer, or the ServerStream's methods) settles the actual
	// cost (decide.LateCost). Nil: every call costs 1.
	Late *decide.LateCost
	// Reserve is what a call reserves under Late; 0 reserves nothing.
	Reserve int64
	// Entry, if set, makes the limit count only the calls that came
	// through that entry (sluice.EntryFrom of the call's context, which an
	// interceptor before it marked: Config.Entry); the others are not
	// limited by it (Sentinel's CHAIN).
	Entry string
	// When, if set, makes the limit apply only while another limit of
	// Config.Limits uses more than When.Above of its budget, under the
	// key that limit's Key gives the call (Sentinel's RELATE; see
	// decide.Relation): otherwise it is neither checked nor charged. The
	// related key is read whether or not the related limit applies to the
	// call itself, so a list keeps writes and reads apart by entry:
	// writes with Entry "writes", reads with Entry "reads" and When
	// writes. A call the related limit gives no key (an empty key, an
	// error) is limited, as if the related limit were busy.
	When *decide.When
}

// KeyFunc returns the key of a call for one limit. fullMethod is
// "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// Global counts every call under one key.
func Global(context.Context, string) (string, error) { return "global", nil }

// ByMethod keys calls by their full method name.
func ByMethod(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }

// ByMetadata keys calls by the value of a request metadata key; calls
// without it are not limited by this limit, and a call that sends it more
// than once is refused with INVALID_ARGUMENT (counting one value while the
// service reads another would let a caller choose its key). A value longer
// than decide.MaxKeyValue bytes is keyed by its SHA-256 digest
// (decide.KeyValue), so a long value is limited like any other rather than
// stored whole or let through.
func ByMetadata(name string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(name)
		switch len(v) {
		case 0:
			return "", nil
		case 1:
			return v[0], nil
		}
		return "", &decide.ClientError{Field: "metadata " + name, Reason: fmt.Sprintf("sent %d times; send it once", len(v))}
	}
}

// ByPeer keys calls by the IP address of the connected peer (without port).
func ByPeer(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", errors.New("grpclimit: no peer address")
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return ap.Addr().Unmap().String(), nil
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String(), nil // a unix socket path, say
	}
	return host, nil
}

// Config configures the interceptors. Only Limits is required.
type Config struct {
	// Limits are checked together for every call: if any refuses, none is
	// charged.
	Limits []Limit

	// OnError is the failure mode when a key cannot be computed or the
	// store fails: sluice.FailOpen lets the call through uncounted,
	// sluice.FailClosed refuses it with UNAVAILABLE. An invalid limit is
	// never let through. Default FailOpen, logged at most once a second.
	OnError sluice.FailureMode

	// MaxDelay bounds the shaping delay (leaky_bucket limits) a call waits
	// before its handler runs; a call given a longer one is refused.
	// Default 1s.
	MaxDelay time.Duration

	// Logger receives the interceptors' logs. Default slog.Default().
	Logger *slog.Logger

	// Observe, if set, is called for each decided call (see
	// decide.Observation). It must be fast and safe for concurrent use.
	Observe func(ctx context.Context, fullMethod string, o decide.Observation)

	// JWT, if set, verifies the bearer token of each call's authorization
	// metadata once, for the limits keyed ByClaim.
	JWT *jwtclaims.Verifier

	// OnWaiting, if set, is called with +1 when a call starts waiting
	// under a limit for a shaping delay and -1 when it stops (see
	// decide.Config.OnWaiting).
	OnWaiting func(limit string, delta int)

	// Entry, if set, marks the calls through these interceptors as having
	// come through the entry Entry (sluice.WithEntry), for the limits that
	// count only the calls of an entry: their own (Limit.Entry) and those
	// of the interceptors and handlers after them. A call marked before
	// keeps its entry: a call's entry is the first it came through.
	// Default none.
	Entry string
}

// Interceptors holds the unary and stream interceptors of one Config.
type Interceptors struct {
	dc      *decide.Decider
	cfg     Config
	related []int // the index of the limit each relates to (When), -1 for none
	pool    sync.Pool
}

// New returns the interceptors for limiter and cfg.
func New(limiter *sluice.Limiter, cfg Config) (*Interceptors, error) {
	if len(cfg.Limits) == 0 {
		return nil, errors.New("grpclimit: New: no limits")
	}
	seen := map[string]bool{}
	for i, l := range cfg.Limits {
		switch {
		case l.Name == "":
			return nil, fmt.Errorf("grpclimit: limit %d: Name is empty", i)
		case seen[l.Name]:
			return nil, fmt.Errorf("grpclimit: limit %q appears twice", l.Name)
		case l.Key == nil:
			return nil, fmt.Errorf("grpclimit: limit %q: Key is nil", l.Name)
		}
		seen[l.Name] = true
		if err := l.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("grpclimit: limit %q: %w", l.Name, err)
		}
		if err := checkLate(l); err != nil {
			return nil, fmt.Errorf("grpclimit: limit %q: %w", l.Name, err)
		}
	}
	names, whens := make([]string, len(cfg.Limits)), make([]*decide.When, len(cfg.Limits))
	for i, l := range cfg.Limits {
		names[i], whens[i] = l.Name, l.When
	}
	related, err := decide.Relations(names, whens)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	dc, err := decide.New(limiter, decide.Config{
		Wait: true, MaxDelay: cfg.MaxDelay, OnError: cfg.OnError, Component: "grpclimit", Logger: cfg.Logger,
		OnWaiting: cfg.OnWaiting, KeyText: func(key string) string { return decide.StoreKeyText(key, 1, false) },
	})
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	in := &Interceptors{dc: dc, cfg: cfg, related: related}
	in.pool.New = func() any { return &scratch{} }
	return in, nil
}

type scratch struct {
	checks []decide.Check
	res    decide.Result
}

// Unary returns the unary server interceptor. Chained after another
// grpclimit interceptor (grpc.ChainUnaryInterceptor), a call it refuses
// charges nothing to the one further out either (see decide.Stack).
func (in *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		sc := in.pool.Get().(*scratch)
		defer in.pool.Put(sc)
		ctx = in.enter(ctx)
		if err := in.admit(ctx, info.FullMethod, sc); err != nil {
			return nil, err
		}
		defer sc.res.Release()
		ctx = decide.Stack(ctx, &sc.res, nil, decide.Fields{})
		if !sc.res.Late() {
			return handler(ctx, req)
		}
		md := newCostMD(&sc.res)
		defer func() { settle(ctx, &sc.res, md, err) }()
		return handler(watchUnary(ctx, md), req)
	}
}

// Stream returns the stream server interceptor; a stream is charged once,
// when it opens. Chained, it stacks as Unary does.
func (in *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		sc := in.pool.Get().(*scratch)
		defer in.pool.Put(sc)
		ctx := in.enter(ss.Context())
		if err := in.admit(ctx, info.FullMethod, sc); err != nil {
			return err
		}
		defer sc.res.Release()
		ctx = decide.Stack(ctx, &sc.res, nil, decide.Fields{})
		if !sc.res.Late() {
			return handler(srv, stackedStream{ss, ctx})
		}
		md := newCostMD(&sc.res)
		defer func() { settle(ctx, &sc.res, md, err) }()
		return handler(srv, stream{ss, watchUnary(ctx, md), md})
	}
}

// stackedStream is a grpc.ServerStream whose context carries the call's
// decision for the interceptors further in.
type stackedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s stackedStream) Context() context.Context { return s.ctx }

// enter returns ctx marked with Config.Entry, unless it has an entry.
func (in *Interceptors) enter(ctx context.Context) context.Context {
	if in.cfg.Entry == "" || sluice.EntryFrom(ctx) != "" {
		return ctx
	}
	return sluice.WithEntry(ctx, in.cfg.Entry)
}

// plan appends the checks of a call to dst.
func (in *Interceptors) plan(ctx context.Context, method string, dst []decide.Check) []decide.Check {
	var buf [128]byte
	ctx = in.withClaims(ctx)
	for i, l := range in.cfg.Limits {
		if l.Entry != "" && sluice.EntryFrom(ctx) != l.Entry {
			continue
		}
		key, err := l.Key(ctx, method)
		switch {
		case err != nil:
			dst = append(dst, decide.Check{Name: l.Name, Limit: l.Limit, Err: fmt.Errorf("key: %w", err)})
		case key != "":
			k := decide.AppendKey(buf[:0], l.Name, key)
			c := decide.Check{Name: l.Name, Key: string(k), Limit: l.Limit, Cost: 1}
			if l.Late != nil {
				c.Cost, c.Late = l.Reserve, l.Late
			}
			if j := in.related[i]; j >= 0 {
				rel := &in.cfg.Limits[j]
				rk, err := rel.Key(ctx, method)
				c.When = decide.ListRelation(rel.Name, rk, err, rel.Limit, l.When.Above)
			}
			dst = append(dst, c)
		}
	}
	return dst
}

// admit decides a call and returns nil if it goes on, or the status error
// to answer it with.
func (in *Interceptors) admit(ctx context.Context, method string, sc *scratch) error {
	sc.checks = in.plan(ctx, method, sc.checks[:0])
	res := &sc.res
	in.dc.Run(ctx, sc.checks, res)
	if in.cfg.Observe != nil {
		for _, o := range res.Observed {
			in.cfg.Observe(ctx, method, o)
		}
	}
	if !res.Proceed() { // nor is anything charged by the interceptors further out
		decide.UndoOuter(ctx, nil)
	}
	switch res.Outcome {
	case decide.Admitted, decide.Delayed, decide.AdmittedUncounted:
		if ctx.Err() != nil {
			res.Release()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	case decide.Invalid:
		return status.Error(codes.InvalidArgument, res.Err.Error())
	case decide.Failed:
		return status.Error(codes.Unavailable, "the rate limiter is unavailable")
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	wait := res.RetryAfter()
	st, _ := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded; retry in %s", res.DecidedBy().Name, wait.Round(time.Millisecond))).
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	return st.Err()
}
