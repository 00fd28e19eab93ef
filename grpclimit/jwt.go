package grpclimit

import (
	"context"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/jwtclaims"
	"google.golang.org/grpc/metadata"
)

// withClaims returns ctx carrying the verified claims of the bearer token
// in the call's authorization metadata (nil claims when it has none, sends
// it more than once, or the token does not verify), verified once for
// every limit of the call. Without Config.JWT it returns ctx.
func (in *Interceptors) withClaims(ctx context.Context) context.Context {
	if in.cfg.JWT == nil {
		return ctx
	}
	var c jwtclaims.Claims
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get("authorization"); len(vs) == 1 {
		c = in.cfg.JWT.Authorization(vs[0])
	}
	return jwtclaims.NewContext(ctx, c)
}

// ByClaim keys calls by a claim of the bearer token in their
// authorization metadata ("Bearer TOKEN"), verified by Config.JWT: sub
// for a limit per user, say. Only a token whose signature, expiry, issuer
// and audience check out yields claims; a call without one (no token, a
// forged, expired or alg none token, an unknown kid, the claim absent) is
// refused with INVALID_ARGUMENT and charged nothing, so that no caller
// chooses its key or escapes the limit. Without Config.JWT every call is
// refused so.
func ByClaim(name string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		c, verified := jwtclaims.FromContext(ctx)
		if !verified {
			return "", &decide.ClientError{Field: "metadata authorization", Reason: "not verified: grpclimit.Config.JWT is not set"}
		}
		v, ok := c.Value(name)
		if !ok {
			return "", &decide.ClientError{Field: "metadata authorization", Reason: "no verified bearer token with claim " + name}
		}
		return v, nil
	}
}
