// Package grpclimit is sluice's gRPC server middleware: unary and stream
// interceptors that check every call against a set of limits (per method,
// per metadata value, per peer address, global) in one all-or-nothing sluice
// Check, and refuse with RESOURCE_EXHAUSTED carrying a RetryInfo detail that
// says when to retry.
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
	"github.com/sluicehq/sluice/httplimit"
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
}

// KeyFunc returns the key of a call for one limit. fullMethod is
// "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// Global counts every call under one key.
func Global(context.Context, string) (string, error) { return "global", nil }

// ByMethod keys calls by their full method name.
func ByMethod(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }

// ByMetadata keys calls by the first value of a request metadata key;
// calls without it are not limited by this limit. A value longer than
// httplimit.MaxKeyValue bytes is keyed by its SHA-256 digest
// (httplimit.KeyValue), so a long value is limited like any other rather
// than stored whole or let through.
func ByMetadata(name string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(name)
		if len(v) == 0 {
			return "", nil
		}
		return httplimit.KeyValue(v[0]), nil
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

	// OnError decides what happens when a key cannot be computed or the
	// store fails: true lets the call through (fail open), false refuses it
	// with UNAVAILABLE. Default: fail open and log, at most once a second.
	OnError func(ctx context.Context, fullMethod string, err error) bool

	// Logger receives the interceptors' logs. Default slog.Default().
	Logger *slog.Logger
}

// Interceptors holds the unary and stream interceptors of one Config.
type Interceptors struct {
	limiter *sluice.Limiter
	cfg     Config
	logMu   sync.Mutex
	lastLog time.Time
}

// New returns the interceptors for limiter and cfg.
func New(limiter *sluice.Limiter, cfg Config) (*Interceptors, error) {
	if limiter == nil {
		return nil, errors.New("grpclimit: New: limiter is nil")
	}
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
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	in := &Interceptors{limiter: limiter, cfg: cfg}
	if in.cfg.OnError == nil {
		in.cfg.OnError = in.failOpen
	}
	return in, nil
}

// Unary returns the unary server interceptor.
func (in *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := in.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor; a stream is charged once,
// when it opens.
func (in *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := in.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// admit checks a call's limits. It returns a function that gives back any
// concurrency leases, or the status error to return.
func (in *Interceptors) admit(ctx context.Context, method string) (func(), error) {
	reqs := make([]sluice.Request, 0, len(in.cfg.Limits))
	names := make([]string, 0, len(in.cfg.Limits))
	for _, l := range in.cfg.Limits {
		key, err := l.Key(ctx, method)
		if err != nil {
			return in.failed(ctx, method, fmt.Errorf("key of limit %q: %w", l.Name, err))
		}
		if key == "" {
			continue
		}
		reqs = append(reqs, sluice.Request{Key: l.Name + "\x00" + key, Limit: l.Limit, Cost: 1})
		names = append(names, l.Name)
	}
	if len(reqs) == 0 {
		return func() {}, nil
	}
	ds := make([]sluice.Decision, len(reqs))
	d, err := in.limiter.CheckEach(ctx, reqs, ds)
	if err != nil {
		return in.failed(ctx, method, err)
	}
	if !d.Allowed {
		name := ""
		for i, di := range ds {
			if !di.Allowed && di.RetryAfter == d.RetryAfter {
				name = names[i]
				break
			}
		}
		st, _ := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded; retry in %s", name, d.RetryAfter.Round(time.Millisecond))).
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
		return nil, st.Err()
	}
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return func() {
		for i, di := range ds {
			if di.Lease != 0 {
				in.limiter.Release(context.WithoutCancel(ctx), reqs[i].Key, reqs[i].Limit, di.Lease)
			}
		}
	}, nil
}

func (in *Interceptors) failed(ctx context.Context, method string, err error) (func(), error) {
	if in.cfg.OnError(ctx, method, err) {
		return func() {}, nil
	}
	return nil, status.Error(codes.Unavailable, "the rate limiter is unavailable")
}

func (in *Interceptors) failOpen(_ context.Context, method string, err error) bool {
	in.logMu.Lock()
	now := time.Now()
	log := now.Sub(in.lastLog) >= time.Second
	if log {
		in.lastLog = now
	}
	in.logMu.Unlock()
	if log {
		in.cfg.Logger.Warn("grpclimit: admitting a call the limiter could not decide", "method", method, "err", err)
	}
	return true
}
