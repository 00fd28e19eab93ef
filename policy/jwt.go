package policy

import (
	"path/filepath"

	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/jwtclaims"
	"go.yaml.in/yaml/v3"
)

// jwtSection reads the policy's jwt: section, the tokens whose claims
// keys (jwt:CLAIM) and overrides ({claim: NAME, equals: VALUE}) read. A
// relative jwks_file is relative to the policy file's directory.
func (l *loader) jwtSection(n *yaml.Node) *jwtclaims.Verifier {
	w := where{}
	f := l.Fields(n, w, "jwt", "jwks_file", "jwks_url", "issuer", "audience", "algorithms", "leeway", "refresh", "max_token_bytes")
	var cfg jwtclaims.Config
	str := func(field string) string {
		if v := f[field]; v != nil {
			s, _ := l.Str(v, w, "jwt."+field)
			return s
		}
		return ""
	}
	cfg.JWKSFile, cfg.JWKSURL, cfg.Issuer, cfg.Audience = str("jwks_file"), str("jwks_url"), str("issuer"), str("audience")
	if cfg.JWKSFile != "" && !filepath.IsAbs(cfg.JWKSFile) {
		cfg.JWKSFile = filepath.Join(filepath.Dir(l.file), cfg.JWKSFile)
	}
	if v := f["algorithms"]; v != nil {
		cfg.Algorithms = l.Strings(v, w, "jwt.algorithms")
	}
	if v := f["leeway"]; v != nil {
		if d, ok := l.Duration(v, w, "jwt.leeway"); ok {
			cfg.Leeway = d
			if d == 0 {
				cfg.Leeway = -1 // written as 0: none (the zero Config means the default)
			}
		}
	}
	if v := f["refresh"]; v != nil {
		cfg.Refresh, _ = l.Duration(v, w, "jwt.refresh")
	}
	if v := f["max_token_bytes"]; v != nil {
		b, _ := l.Int(v, w, "jwt.max_token_bytes", 256, 1<<20)
		cfg.MaxTokenBytes = int(b)
	}
	cfg.Logger = l.opts.Logger
	v, err := jwtclaims.New(cfg)
	for _, ce := range yamlload.Collect[*jwtclaims.ConfigError](err) {
		at := n
		if f[ce.Field] != nil {
			at = f[ce.Field]
		}
		l.Fail(at, w, "jwt."+ce.Field, "%s", ce.Reason)
	}
	if err != nil {
		return nil
	}
	if err := v.Err(); err != nil {
		l.warn(f["jwks_url"], w, "jwt.jwks_url", "the key set could not be fetched (%v): no token verifies until a fetch succeeds", err)
	}
	return v
}
