package decide

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/llmusage"
)

// StatusRange is a range of response statuses, From to To inclusive: HTTP
// status codes (401, 500-599) or gRPC codes (16 UNAUTHENTICATED).
type StatusRange struct{ From, To int }

// StatusSet is the set of response statuses a LateCost.When charges: a
// check of a limit with count_when reserves its cost when it is decided,
// and the settle keeps the charge only when the response's status is in
// the set (refunding it otherwise). The zero value holds no status.
type StatusSet []StatusRange

// Has reports whether status is in s.
func (s *StatusSet) Has(status int) bool {
	if s == nil {
		return false
	}
	for _, r := range *s {
		if r.From <= status && status <= r.To {
			return true
		}
	}
	return false
}

// String writes s as a policy writes it: "401, 500-599".
func (s StatusSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = fmt.Sprint(r.From)
		if r.To != r.From {
			parts[i] += fmt.Sprintf("-%d", r.To)
		}
	}
	return strings.Join(parts, ", ")
}

// Response is what a front-end knows of a response when it settles the
// late costs of its request (Result.SettleResponse).
type Response struct {
	// Status is the response's status: an HTTP status code, or the gRPC
	// code of a call.
	Status int
	// HasStatus says Status is known. Without it, a check whose LateCost
	// has When is charged as if the status were in it: a response whose
	// outcome is unknown counts.
	HasStatus bool
	// Values returns the response's values of a header field or trailer
	// (nil when it has none). Nil: it has none.
	Values func(name string) []string
	// Usage returns what the LLM answer reported in format f
	// (llmusage.Meter), for the checks that settle a TokenCost; nil (or
	// a nil Usage) when the answer could not be read (it was compressed,
	// or taken over): such a check is charged its reservation.
	Usage func(f *llmusage.Format) *llmusage.Usage
}

// usage is resp.Usage's reading in format f, or nil.
func (resp Response) usage(f *llmusage.Format) *llmusage.Usage {
	if resp.Usage == nil {
		return nil
	}
	return resp.Usage(f)
}

// values is resp.Values, or none.
func (resp Response) values(name string) []string {
	if resp.Values == nil {
		return nil
	}
	return resp.Values(name)
}

// counts reports whether the response counts under lc: always, unless lc
// counts only some statuses (When) and the response's is known and not one
// of them.
func (resp Response) counts(lc *LateCost) bool {
	return lc.When == nil || !resp.HasStatus || lc.When.Has(resp.Status)
}

// SettleResponse is Settle with what is known of the response: its status
// too. A check whose LateCost has When keeps what it reserved (or the cost
// Header reports, when it names one) if the status is in When, and is
// refunded all of it otherwise: only the responses that match are charged,
// yet every request was checked, and each one in flight holds its
// reservation until its response settles it, so that requests in flight at
// once cannot spend more than the limit has.
func (r *Result) SettleResponse(ctx context.Context, resp Response, dst []Settled) []Settled {
	if !r.Late() {
		return dst
	}
	r.settled = true // a second call would charge the difference twice
	for i := range r.Enforced {
		dst = r.settleOne(ctx, &r.Enforced[i], r.reqs[i].Cost, r.Each[i].Allowed, resp, dst)
	}
	for i := range r.Shadow {
		dst = r.settleOne(ctx, &r.Shadow[i], r.shadowReqs[i].Cost, r.ShadowEach[i].Allowed, resp, dst)
	}
	return dst
}
