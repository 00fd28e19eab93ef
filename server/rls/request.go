package rls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// validate checks a request against the protocol and the bounds b.
func validate(req *rlspb.RateLimitRequest, b *Bounds) error {
	switch {
	case req.Domain == "":
		return errors.New("rls: the domain must not be empty")
	case len(req.Domain) > b.Length:
		return fmt.Errorf("rls: the domain is %d bytes long, more than %d", len(req.Domain), b.Length)
	case len(req.Descriptors) == 0:
		return errors.New("rls: the request has no descriptors")
	case len(req.Descriptors) > b.Descriptors:
		return fmt.Errorf("rls: the request has %d descriptors, more than %d", len(req.Descriptors), b.Descriptors)
	}
	for i, d := range req.Descriptors {
		if d == nil {
			return fmt.Errorf("rls: descriptor %d is missing", i)
		}
		if len(d.Entries) > b.Entries {
			return fmt.Errorf("rls: descriptor %d has %d entries, more than %d", i, len(d.Entries), b.Entries)
		}
		for j, e := range d.Entries {
			if e == nil {
				return fmt.Errorf("rls: descriptor %d: entry %d is missing", i, j)
			}
			if len(e.Key) > b.Length || len(e.Value) > b.Length {
				return fmt.Errorf("rls: descriptor %d: entry %d: keys and values are at most %d bytes", i, j, b.Length)
			}
		}
	}
	return nil
}

// hits is the cost of a descriptor: its own hits_addend when set (0 then
// checks without charging), else the request's, where 0 means 1, as the
// protocol says ("if the value is not set, ... increases by 1").
func hits(req *rlspb.RateLimitRequest, d *commonpb.RateLimitDescriptor) uint64 {
	if d.HitsAddend != nil {
		return d.HitsAddend.Value
	}
	return uint64(max(1, req.HitsAddend))
}

// overridePath is the path of a descriptor's own limit.
const overridePath = "limit_override"

// overrideKey is the key of a descriptor with its own limit of window
// period: the descriptor's key and a part naming the window, so that it
// counts apart from the configured limit of the descriptor and from its
// own limits of other windows (a store keeps one state per key and
// algorithm, whatever the count: sluice.Limit), and requests_per_unit may
// change from request to request on one counter, as in
// envoyproxy/ratelimit. The extra part makes the number of parts even,
// which no key of key has (three, then two per entry).
func overrideKey(k string, period time.Duration) string {
	return string(decide.AppendKeyPart([]byte(k), "\x00override\x00"+strconv.FormatInt(int64(period/time.Microsecond), 10)))
}

// override compiles a descriptor's own limit (RateLimitDescriptor.limit):
// a fixed window, as envoyproxy/ratelimit applies it.
func override(ov *commonpb.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	r := &rule{path: overridePath, rpu: ov.RequestsPerUnit, mult: 1}
	name := typepb.RateLimitUnit_name[int32(ov.Unit)]
	for _, u := range units {
		if ov.Unit != typepb.RateLimitUnit_UNKNOWN && name == toUpper(u.name) {
			r.unit, r.period = u.pb, u.d
		}
	}
	if r.period == 0 {
		return nil, fmt.Errorf("unit %s is not a unit of time this service knows", ov.Unit)
	}
	if m := ov.UnitMultiplier; m != nil {
		if m.Value == 0 {
			return nil, errors.New("unit_multiplier must be at least 1")
		}
		r.mult = m.Value
		r.period *= time.Duration(m.Value)
	}
	lim, err := extension{}.limit(int64(r.rpu), r.period)
	if err != nil {
		return nil, err
	}
	r.limit, r.peer = lim, peerLimit(lim, r.rpu, r.period)
	return r, nil
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// match finds the rate_limit for a request descriptor, by
// envoyproxy/ratelimit's rules: at each depth the most specific entry (key
// and value, then the first wildcard that matches, then the key alone),
// without backtracking; the limit applies only if the request has exactly
// as many entries as the matched path is deep. shared holds, for each
// entry matched by a share_threshold wildcard, the wildcard's value (nil
// when there is none): those entries count under the pattern, not the
// request's value.
func (d *domain) match(entries []*commonpb.RateLimitDescriptor_Entry) (r *rule, shared []string) {
	lv := &d.root
	for i, e := range entries {
		n, viaWildcard := lv.lookup(e.Key, e.Value)
		if n == nil {
			return nil, nil
		}
		if viaWildcard && n.share {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = n.value
		}
		if i == len(entries)-1 {
			return n.rule, shared
		}
		if !n.nested {
			return nil, nil
		}
		lv = &n.children
	}
	return nil, nil
}

// key builds the sluice key of a descriptor with decide.AppendKey: an
// empty first part and "rls" (no policy key starts with an empty part, and
// the decision API's explicit keys continue with "api"), then the domain
// and every entry's key and value, each bounded (a value longer than
// decide.MaxKeyValue bytes is counted under its digest, as the gateway
// counts header values) and length-prefixed, so that no two different
// (domain, entries) ever meet ("a_b"+"c" and "a"+"b_c" stay apart). The
// value is the request's, so each distinct value of a key-only or wildcard
// descriptor has its own counter, except where shared (see match) names a
// share_threshold pattern: that entry counts under the pattern, marked so
// that no request value meets it.
func key(domain string, entries []*commonpb.RateLimitDescriptor_Entry, shared []string) string {
	var buf [256]byte
	b := decide.AppendKey(buf[:0], "", "rls", domain)
	for i, e := range entries {
		b = decide.AppendKeyPart(b, e.Key)
		if shared != nil && shared[i] != "" {
			b = decide.AppendKeyPart(b, "\x00share\x00"+shared[i])
			continue
		}
		b = decide.AppendKeyPart(b, e.Value)
	}
	return string(b)
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// currentIn writes into c the limit reported in a descriptor status, and
// returns c.
func (r *rule) currentIn(c *rlspb.RateLimitResponse_RateLimit) *rlspb.RateLimitResponse_RateLimit {
	c.Name, c.RequestsPerUnit, c.Unit = r.name, r.rpu, r.unit
	if r.mult != 1 {
		c.UnitMultiplier = wrapperspb.UInt32(r.mult)
	}
	return c
}

// ceilSecond rounds d up to whole seconds, as envoyproxy/ratelimit reports
// duration_until_reset (the seconds left in the window).
func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// seconds is ceilSecond as a count.
func seconds(d time.Duration) int64 { return int64(ceilSecond(d) / time.Second) }

// storeError turns a Limiter error into a gRPC status, logging it to logs.
func storeError(ctx context.Context, logs *aggregator, domain string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	logs.storeError(domain, err)
	if sluice.IsRequestError(err) {
		return status.Errorf(codes.Internal, "rls: %v", err)
	}
	return status.Errorf(codes.Unavailable, "rls: store: %v", err)
}

// sameWindow reports whether a descriptor's own limit ov has the window of
// the limit configured for entries: both fixed windows of one period,
// without calendar or share_threshold pattern, so that
// envoyproxy/ratelimit's counter key (entries and window start) is the
// same for both.
func (d *domain) sameWindow(entries []*commonpb.RateLimitDescriptor_Entry, ov *rule) bool {
	r, shared := d.match(entries)
	return r != nil && shared == nil && !r.unlimited && r.period == ov.period &&
		algo.Aligned(r.peer.Algorithm) && r.peer.Calendar == 0
}
