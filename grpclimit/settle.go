package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/decide"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// costMD collects the response metadata (header and trailer) a handler
// sets, to read a late cost (decide.LateCost) from once it returns, and
// strips the cost keys the LateCost says the caller must not see.
type costMD struct {
	mu              sync.Mutex
	header, trailer metadata.MD
	strip           []string // lower case
}

func newCostMD(res *decide.Result) *costMD {
	c := &costMD{}
	for _, cs := range [][]decide.Check{res.Enforced, res.Shadow} {
		for i := range cs {
			if lc := cs[i].Late; lc != nil && lc.Strip {
				c.strip = append(c.strip, strings.ToLower(lc.Header))
			}
		}
	}
	return c
}

// record keeps md in *into and returns what to send on: md without the
// stripped keys.
func (c *costMD) record(into *metadata.MD, md metadata.MD) metadata.MD {
	c.mu.Lock()
	*into = metadata.Join(*into, md)
	c.mu.Unlock()
	if len(c.strip) == 0 {
		return md
	}
	out := md.Copy()
	for _, k := range c.strip {
		delete(out, k)
	}
	return out
}

// values returns a key's values: the trailer's if it has any, else the
// header's.
func (c *costMD) values(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if vs := c.trailer.Get(name); len(vs) > 0 {
		return vs
	}
	return c.header.Get(name)
}

// transport is the grpc.ServerTransportStream of a unary call, recording
// the metadata grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer set.
type transport struct {
	grpc.ServerTransportStream
	md *costMD
}

func (t transport) SetHeader(md metadata.MD) error {
	return t.ServerTransportStream.SetHeader(t.md.record(&t.md.header, md))
}

func (t transport) SendHeader(md metadata.MD) error {
	return t.ServerTransportStream.SendHeader(t.md.record(&t.md.header, md))
}

func (t transport) SetTrailer(md metadata.MD) error {
	return t.ServerTransportStream.SetTrailer(t.md.record(&t.md.trailer, md))
}

// watchUnary returns ctx with its transport stream recording metadata into
// md, when the call's checks have late costs.
func watchUnary(ctx context.Context, md *costMD) context.Context {
	st := grpc.ServerTransportStreamFromContext(ctx)
	if st == nil {
		return ctx
	}
	return grpc.NewContextWithServerTransportStream(ctx, transport{st, md})
}

// stream is a grpc.ServerStream recording the metadata its handler sets,
// through its own methods or through grpc.SetHeader(ss.Context(), ...).
type stream struct {
	grpc.ServerStream
	ctx context.Context
	md  *costMD
}

func (s stream) Context() context.Context { return s.ctx }

func (s stream) SetHeader(md metadata.MD) error {
	return s.ServerStream.SetHeader(s.md.record(&s.md.header, md))
}

func (s stream) SendHeader(md metadata.MD) error {
	return s.ServerStream.SendHeader(s.md.record(&s.md.header, md))
}

func (s stream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(s.md.record(&s.md.trailer, md))
}

// settle settles the late costs of res from the metadata the handler set.
// The caller may have gone: the settle outlives the call.
func settle(ctx context.Context, res *decide.Result, md *costMD, err error) {
	resp := decide.Response{Status: int(status.Code(err)), HasStatus: true, Values: md.values}
	res.SettleResponse(context.WithoutCancel(ctx), resp, nil)
}

// checkLate reports a Limit whose Late or Reserve cannot work.
func checkLate(l Limit) error {
	if l.Late != nil && (l.Late.Header == "" && l.Late.When == nil || strings.ContainsAny(l.Late.Header, " \t\r\n:")) {
		return fmt.Errorf("Late.Header %q is not a metadata key", l.Late.Header)
	}
	return l.Late.Check(l.Reserve, l.Limit)
}
