package policy

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/celexpr"
	"github.com/sluicehq/sluice/jwtclaims"
)

// facts are what a request's limits read beyond its header fields, worked
// out once per request: the claims of its verified bearer token, and the
// input of its CEL expressions (built on first use).
type facts struct {
	claims jwtclaims.Claims
	input  celexpr.Input
}

type factsKey struct{}

// withFacts returns r carrying its facts, for a policy with a jwt:
// section or expressions: the bearer token verified once for every limit,
// override and expression of the request (no claims when it has no token
// that verifies). Other policies return r.
func (p *Policy) withFacts(r *http.Request) *http.Request {
	if p.jwt == nil && !p.exprs {
		return r
	}
	f := &facts{}
	if p.jwt != nil {
		f.claims = p.jwt.Request(r)
	}
	f.input = celexpr.Input{Request: r, Claims: f.claims, IP: func() string {
		a, err := p.ClientIP.Addr(r)
		if err != nil {
			return ""
		}
		return a.String()
	}}
	return r.WithContext(context.WithValue(r.Context(), factsKey{}, f))
}

// factsOf returns r's facts (withFacts); empty ones when it has none.
func factsOf(r *http.Request) *facts {
	if f, ok := r.Context().Value(factsKey{}).(*facts); ok {
		return f
	}
	return &facts{input: celexpr.Input{Request: r}}
}

// claim returns the value of a verified claim of r, "" when r's token did
// not verify or has no such claim.
func claim(r *http.Request, name string) string {
	v, _ := factsOf(r).claims.Value(name)
	return v
}
