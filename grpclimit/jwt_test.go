package grpclimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/jwtclaims"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// jwtClient serves the counting health service behind a per-user limit
// (3 calls) keyed ByClaim("sub"), tokens verified against keys; withJWT
// false leaves Config.JWT unset.
func jwtClient(t *testing.T, withJWT bool, keys ...*jwttest.Key) (healthpb.HealthClient, *countingHealth) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	jwttest.WriteJWKS(t, path, keys...)
	var v *jwtclaims.Verifier
	if withJWT {
		var err error
		if v, err = jwtclaims.New(jwtclaims.Config{JWKSFile: path, Issuer: jwttest.Issuer, Audience: jwttest.Audience}); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	in, err := grpclimit.New(sluice.New(mem), grpclimit.Config{JWT: v, Limits: []grpclimit.Limit{
		{Name: "per-user", Key: grpclimit.ByClaim("sub"), Limit: sluice.FixedWindow(3, time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := &countingHealth{}
	return serveHealth(t, svc, grpc.UnaryInterceptor(in.Unary())), svc
}

func callCodes(t *testing.T, client healthpb.HealthClient, n int, md metadata.MD) (ok int, first codes.Code) {
	t.Helper()
	first = codes.OK
	for i := range n {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 30*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		c := status.Code(err)
		if c == codes.OK {
			ok++
		} else if first == codes.OK || i == 0 {
			first = c
		}
	}
	return ok, first
}

// TestJWTClaimsOverGRPC: a verified token's sub keys the limit (3 of 5);
// a token that does not verify, or none, or two, is refused with
// INVALID_ARGUMENT and never reaches the service.
func TestJWTClaimsOverGRPC(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	client, svc := jwtClient(t, true, good)
	if ok, c := callCodes(t, client, 5, metadata.Pairs("authorization", "Bearer "+good.Token(t, "alice", ""))); ok != 3 || c != codes.ResourceExhausted {
		t.Fatalf("alice: %d of 5 (%v), want 3 then RESOURCE_EXHAUSTED", ok, c)
	}
	now := time.Now()
	pro := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "mallory", "plan": "pro"}
		for k, v := range extra {
			c[k] = v
		}
		return jwttest.Claims(now, c)
	}
	hostile := map[string]metadata.MD{
		"forged":         metadata.Pairs("authorization", "Bearer "+jwttest.NewKey(t, "k1").Sign(t, pro(nil))),
		"expired":        metadata.Pairs("authorization", "Bearer "+good.Sign(t, pro(map[string]any{"exp": now.Add(-time.Hour).Unix()}))),
		"alg none":       metadata.Pairs("authorization", "Bearer "+jwttest.None("k1", pro(nil))),
		"wrong audience": metadata.Pairs("authorization", "Bearer "+good.Sign(t, pro(map[string]any{"aud": "web"}))),
		"unknown kid":    metadata.Pairs("authorization", "Bearer "+jwttest.NewKey(t, "k2").Sign(t, pro(nil))),
		"oversized":      metadata.Pairs("authorization", "Bearer "+strings.Repeat("a", 9<<10)),
		"none":           metadata.Pairs(),
		"twice":          metadata.Pairs("authorization", "Bearer "+good.Token(t, "bob", ""), "authorization", "Bearer x"),
		"no sub":         metadata.Pairs("authorization", "Bearer "+good.Sign(t, pro(map[string]any{"sub": nil}))),
	}
	for name, md := range hostile {
		if ok, c := callCodes(t, client, 5, md); ok != 0 || c != codes.InvalidArgument {
			t.Errorf("%s: %d of 5 (%v), want 0, INVALID_ARGUMENT", name, ok, c)
		}
	}
	if n := svc.n.Load(); n != 3 {
		t.Fatalf("the service saw %d calls, want 3", n)
	}
}

// TestByClaimWithoutJWT: ByClaim without Config.JWT refuses every call
// rather than let it through uncounted.
func TestByClaimWithoutJWT(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	client, svc := jwtClient(t, false, good)
	if ok, c := callCodes(t, client, 3, metadata.Pairs("authorization", "Bearer "+good.Token(t, "alice", ""))); ok != 0 || c != codes.InvalidArgument || svc.n.Load() != 0 {
		t.Fatalf("%d of 3 (%v), want 0, INVALID_ARGUMENT", ok, c)
	}
}

// TestJWKSUnreachableOverGRPC: with a key set URL that cannot be fetched,
// every token is unverified: INVALID_ARGUMENT, and the service never sees
// the call.
func TestJWKSUnreachableOverGRPC(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(idp.Close)
	v, err := jwtclaims.New(jwtclaims.Config{JWKSURL: idp.URL, Issuer: jwttest.Issuer, Audience: jwttest.Audience, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	in, err := grpclimit.New(sluice.New(mem), grpclimit.Config{JWT: v, Limits: []grpclimit.Limit{
		{Name: "per-user", Key: grpclimit.ByClaim("sub"), Limit: sluice.FixedWindow(3, time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := &countingHealth{}
	client := serveHealth(t, svc, grpc.UnaryInterceptor(in.Unary()))
	tok := jwttest.NewKey(t, "k1").Token(t, "alice", "pro")
	if ok, c := callCodes(t, client, 3, metadata.Pairs("authorization", "Bearer "+tok)); ok != 0 || c != codes.InvalidArgument || svc.n.Load() != 0 {
		t.Fatalf("%d of 3 (%v), the service saw %d; want 0, INVALID_ARGUMENT, 0", ok, c, svc.n.Load())
	}
}
