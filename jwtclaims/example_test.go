package jwtclaims_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/sluicehq/sluice/jwtclaims"
)

// An identity provider's key signs a token; the Verifier, given the
// provider's public key set, yields the token's claims, and refuses a
// token signed by anyone else.
func Example() {
	idp, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dir, _ := os.MkdirTemp("", "jwks")
	defer os.RemoveAll(dir)
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &idp.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	os.WriteFile(filepath.Join(dir, "jwks.json"), set, 0o600)

	v, err := jwtclaims.New(jwtclaims.Config{
		JWKSFile: filepath.Join(dir, "jwks.json"),
		Issuer:   "https://issuer.example",
		Audience: "api",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	sign := func(key *ecdsa.PrivateKey) string {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
		payload, _ := json.Marshal(map[string]any{"iss": "https://issuer.example", "aud": "api", "sub": "alice",
			"plan": "pro", "exp": time.Now().Add(time.Hour).Unix()})
		obj, _ := s.Sign(payload)
		tok, _ := obj.CompactSerialize()
		return tok
	}

	claims := v.Authorization("Bearer " + sign(idp))
	sub, _ := claims.Value("sub")
	plan, _ := claims.Value("plan")
	fmt.Println(sub, plan)

	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, err = v.Verify(sign(forger))
	fmt.Println(err)
	// Output:
	// alice pro
	// jwtclaims: invalid token: signature does not verify
}
