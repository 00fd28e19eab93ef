package shed

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// GRPCPriority returns the priority of a gRPC call; fullMethod is
// "/package.Service/Method".
type GRPCPriority func(ctx context.Context, fullMethod string) Priority

// MetadataPriority reads a call's priority from the metadata key name
// ("critical", "default" or "sheddable"), but only when the peer's address
// is in one of trusted: a caller cannot make itself critical. Any other
// call is Default, as is one that sends the key more than once or with
// another value.
func MetadataPriority(name string, trusted []netip.Prefix) GRPCPriority {
	return func(ctx context.Context, _ string) Priority {
		md, _ := metadata.FromIncomingContext(ctx)
		vs := md.Get(name)
		if len(vs) != 1 || !peerIn(ctx, trusted) {
			return Default
		}
		p, err := ParsePriority(vs[0])
		if err != nil {
			return Default
		}
		return p
	}
}

func peerIn(ctx context.Context, trusted []netip.Prefix) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || len(trusted) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, pfx := range trusted {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// UnaryServerInterceptor admits each unary call through l, with the
// priority priority gives it (nil: Default). A refused call ends with
// UNAVAILABLE and a RetryInfo detail; the handler's latency is l's sample,
// unless the call's context ended first.
func (l *Limiter) UnaryServerInterceptor(priority GRPCPriority) grpc.UnaryServerInterceptor {
	refusals := l.grpcRefusals()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		tok, err := l.admitCall(ctx, info.FullMethod, priority, &refusals)
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		if ctx.Err() != nil {
			tok.Ignore()
		} else {
			tok.Done()
		}
		return resp, err
	}
}

// StreamServerInterceptor admits each stream through l when it opens. A
// stream does not hold a slot while it lasts and its duration is no
// sample: how long a stream stays open says nothing about load.
func (l *Limiter) StreamServerInterceptor(priority GRPCPriority) grpc.StreamServerInterceptor {
	refusals := l.grpcRefusals()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		tok, err := l.admitCall(ss.Context(), info.FullMethod, priority, &refusals)
		if err != nil {
			return err
		}
		tok.Ignore()
		return handler(srv, ss)
	}
}

// admitCall acquires a slot for a call, or returns the status to end it
// with.
func (l *Limiter) admitCall(ctx context.Context, method string, priority GRPCPriority, refusals *[nPriorities]error) (Token, error) {
	p := Default
	if priority != nil {
		p = priority(ctx, method)
	}
	tok, err := l.Acquire(ctx, p)
	switch {
	case err == nil:
		return tok, nil
	case ctx.Err() != nil:
		return Token{}, status.FromContextError(ctx.Err()).Err()
	case p >= nPriorities:
		p = Default
	}
	return Token{}, refusals[p]
}

// grpcRefusals are the statuses of shed calls, one per priority, made
// once so that refusing stays cheap under overload.
func (l *Limiter) grpcRefusals() (out [nPriorities]error) {
	for _, p := range Priorities {
		st, _ := status.New(codes.Unavailable, fmt.Sprintf("the service is overloaded and shed this %s call; retry in %s", p, l.cfg.RetryAfter)).
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(l.cfg.RetryAfter)})
		out[p] = st.Err()
	}
	return out
}
