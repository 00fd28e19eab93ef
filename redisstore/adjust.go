package redisstore

import (
	"context"
	"strconv"

	"github.com/sluicehq/sluice"
)

var _ sluice.Adjuster = (*Store)(nil)

// Adjust changes the usage of r.Key under r.Limit by r.Cost, a signed
// delta, in one script and one round trip (scripts/adjust.lua): see
// sluice.Limiter.Adjust for the rules. A state kept under another limit of
// the key's identity (sluice.Limit.Shares) is carried over to r.Limit
// first, as by Take. It works on Redis Cluster as Take does: a request's
// keys share a slot. A refund drops the key's refusal
// from the near cache; a charge that leaves the key refused puts it there.
// If ctx ends while the script is in flight, Adjust returns ctx's error,
// and the adjustment may have been made.
func (s *Store) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	c, err := s.compile(&r.Limit)
	if err == nil {
		err = c.p.CheckAdjust(r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	q := request{Request: r, p: c.p, params: c.params}
	if c.cal != nil {
		q.params = c.calendar(s.wallNow().UnixMicro())
	}
	q.Cost = 1 // the cost field is not sent: the delta follows the request
	q.state, q.log = s.keysWith(&r, c.name, usesLog(c.p.Alg))
	call := s.call(scripts().adjust, []request{q}, nil)
	call.args = append(call.args, strconv.FormatInt(r.Cost, 10))
	reply, err := s.run(ctx, call)
	if err != nil {
		return sluice.Decision{}, s.wrap(err, "adjust", q)
	}
	var d [1]sluice.Decision
	if _, err := decode(reply, d[:]); err != nil {
		return sluice.Decision{}, s.wrap(err, "adjust", q)
	}
	switch {
	case r.Cost < 0:
		s.near.forget(q.state)
	case r.Cost > 0 && !d[0].Allowed && d[0].RetryAfter > 0:
		s.near.put(q.state, &r.Limit, 1, 0, d[0], s.localNow())
	}
	return d[0], nil
}
