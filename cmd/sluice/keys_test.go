package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// sluiceKeys runs `sluice keys args...` in this process and returns its
// exit code, stdout and stderr.
func sluiceKeys(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"keys"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestKeysCommand: against a real sluice serve whose admin listener asks
// for a token, an operator lists the limits, inspects a client's exhausted
// quota and resets it with sluice keys; the client is admitted again.
func TestKeysCommand(t *testing.T) {
	dir := t.TempDir()
	policy, tokens, mine := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens"), filepath.Join(dir, "my-token")
	writeFile(t, policy, `
rules:
  - name: api
    limits:
      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 2, window: 1h}
      - {name: per-user-ip, key: [header:X-User, ip], algorithm: token_bucket, rate: 10/h, burst: 10}
`)
	writeFile(t, tokens, "# operators\nadmin-s3cret\n")
	writeFile(t, mine, "\n  admin-s3cret\n")
	p := start(t, nil, "--policy", policy, "--auth-tokens", tokens)
	admin := p.addrs["admin"]
	for i, want := range []int{200, 200, 429} {
		if r := get(t, p.url("gateway", "/"), "X-User", "ann"); r.status != want {
			t.Fatalf("request %d: %d, want %d", i, r.status, want)
		}
	}

	code, out, errs := sluiceKeys("list", "--admin", admin, "--token-file", mine)
	if code != 0 || !strings.Contains(out, "api") || !strings.Contains(out, "per-user-ip") || !strings.Contains(out, "header:X-User") {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	// ann's key is listed masked, with how to see it in clear.
	if want := "(keys masked; to see them in clear, run sluice serve with --show-keys,\n  show_keys: true in its config, or SLUICE_SHOW_KEYS=true)"; !strings.Contains(out, "key#") || !strings.Contains(out, want) {
		t.Errorf("list: no masked key, or no %q in:\n%s", want, out)
	}
	if _, help, _ := sluiceKeys("--help"); !strings.Contains(help, "sluice serve --show-keys") {
		t.Errorf("keys --help does not say how to see keys in clear:\n%s", help)
	}
	code, out, errs = sluiceKeys("inspect", "api", "per-user", "ann", "--admin", admin, "--token-file", mine)
	if code != 0 || !strings.Contains(out, "rule api, limit per-user, key ann: fixed_window(2 per 1h)") || !strings.Contains(out, "remaining 0; a request now would be refused, retry after") {
		t.Fatalf("inspect: %d\n%s%s", code, out, errs)
	}
	t.Setenv("SLUICE_ADMIN", admin) // as an operator's shell would have it
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-s3cret")
	code, out, errs = sluiceKeys("reset", "api", "per-user", "ann")
	if code != 0 || !strings.HasPrefix(out, "reset: the key's usage starts afresh\n") || !strings.Contains(out, "remaining 2; a request now would be admitted") {
		t.Fatalf("reset: %d\n%s%s", code, out, errs)
	}
	if r := get(t, p.url("gateway", "/"), "X-User", "ann"); r.status != 200 {
		t.Fatalf("after the reset: %d, want 200", r.status)
	}
	code, out, _ = sluiceKeys("inspect", "--json", "api", "per-user-ip", "ann", "127.0.0.1")
	if code != 0 || !strings.HasPrefix(out, `{"rule":"api","limit":"per-user-ip","values":["ann","127.0.0.1"]`) {
		t.Fatalf("inspect --json: %d %s", code, out)
	}
	p.waitLog(`"msg":"admin: key reset"`, 5*time.Second)
}

// TestKeysCommandErrors: each way sluice keys can fail says what to do
// about it, and exits 1 (the server) or 2 (the command line).
func TestKeysCommandErrors(t *testing.T) {
	dir := t.TempDir()
	policy, tokens := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens")
	writeFile(t, policy, "rules:\n  - name: api\n    limits:\n      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 2, window: 1h}\n")
	writeFile(t, tokens, "admin-s3cret\n")
	p := start(t, nil, "--policy", policy, "--auth-tokens", tokens)
	admin := p.addrs["admin"]
	closed := closedPort(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"no token", nil, []string{"inspect", "--admin", admin, "api", "per-user", "ann"}, 1, "401: " + admin + " asks for a token (its auth.tokens_file): pass --token-file FILE"},
		{"wrong token", []string{"SLUICE_ADMIN_TOKEN=nope"}, []string{"reset", "--admin", admin, "api", "per-user", "ann"}, 1, "401: " + admin + " refused the token"},
		{"unknown rule", []string{"SLUICE_ADMIN_TOKEN=admin-s3cret"}, []string{"inspect", "--admin", admin, "web", "per-user", "ann"}, 1, "404: the policy has no limit per-user in rule web; 'sluice keys list' shows its rules and limits"},
		{"not the admin listener", []string{"SLUICE_ADMIN_TOKEN=admin-s3cret"}, []string{"inspect", "--admin", p.addrs["gateway"], "api", "per-user", "ann"}, 1, p.addrs["gateway"] + ` answered "Hello from sluice's demo upstream.`},
		{"not sluice", []string{"SLUICE_ADMIN_TOKEN=admin-s3cret"}, []string{"list", "--admin", p.addrs["api"]}, 1, "404: " + p.addrs["api"] + " has no /status.json: is --admin sluice serve's admin listener"},
		{"too many values", []string{"SLUICE_ADMIN_TOKEN=admin-s3cret"}, []string{"inspect", "--admin", admin, "api", "per-user", "ann", "bob"}, 1, `400: limit "per-user" has key header:X-User: want 1 value(s)`},
		{"nothing listening", nil, []string{"list", "--admin", closed}, 1, "nothing listens at " + closed + ": is sluice serve running"},
		{"no token file", nil, []string{"list", "--admin", admin, "--token-file", filepath.Join(dir, "missing")}, 2, "--token-file: open " + filepath.Join(dir, "missing")},
		{"bad address", nil, []string{"list", "--admin", "ftp://x"}, 2, `--admin "ftp://x": want HOST:PORT`},
		{"missing values", nil, []string{"reset", "api", "per-user"}, 2, "want RULE LIMIT VALUE..."},
		{"typo", nil, []string{"rest", "api", "per-user", "ann"}, 2, `unknown operation "rest"; did you mean reset?`},
		{"no operation", nil, nil, 2, "name an operation: list, bans, inspect or reset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, kv := range append([]string{"SLUICE_ADMIN_TOKEN=", "SLUICE_ADMIN_TOKEN_FILE=", "SLUICE_ADMIN="}, c.env...) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			code, out, errs := sluiceKeys(c.args...)
			if code != c.code || !strings.Contains(errs, c.want) || out != "" {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s\nwant in stderr: %s", code, c.code, out, errs, c.want)
			}
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestKeysCommandTLS: an admin listener on TLS that asks for client
// certificates is reached with --ca-file, --cert-file and --key-file; each
// missing piece is named.
func TestKeysCommandTLS(t *testing.T) {
	ca := newPKI(t, "keys")
	certFile, keyFile, _ := ca.issue("sluice")
	opCert, opKey, _ := ca.issue("operator")
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", ca.caFile,
		"--tls-listeners", "admin", "--tls-client-auth", "admin")
	admin := p.addrs["admin"]
	for _, c := range []struct {
		name string
		args []string
		code int
		want string // in stdout when code is 0, else in stderr
	}{
		{"every piece", []string{"--ca-file", ca.caFile, "--cert-file", opCert, "--key-file", opKey}, 0, "RULE"},
		{"plain HTTP", []string{"--admin", admin}, 1, admin + " speaks TLS: pass --admin https://" + admin},
		{"no CA", []string{"--cert-file", opCert, "--key-file", opKey}, 1, "certificate is not trusted: pass --ca-file"},
		{"no client certificate", []string{"--ca-file", ca.caFile}, 1, "asks for a client certificate (tls.client_auth) and refused this one or its absence: pass --cert-file and --key-file"},
		{"a certificate without its key", []string{"--ca-file", ca.caFile, "--cert-file", opCert}, 2, "--cert-file and --key-file go together"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"list", "--admin", "https://" + admin}, c.args...)
			code, out, errs := sluiceKeys(args...)
			got := out
			if c.code != 0 {
				got = errs
			}
			if code != c.code || !strings.Contains(got, c.want) {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s\nwant: %s", code, c.code, out, errs, c.want)
			}
		})
	}
}

// TestKeysOneMask: a refused key reads the same in the refusal log, the
// status page and sluice keys list, byte for byte, and each of those
// renderings names the key to sluice keys inspect and reset; the value
// itself is written nowhere.
func TestKeysOneMask(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: api
    limits:
      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 1, window: 1h}
`)
	p := start(t, nil, "--policy", policy)
	admin := p.addrs["admin"]
	for i, want := range []int{200, 429} {
		if r := get(t, p.url("gateway", "/"), "X-User", "ann-secret"); r.status != want {
			t.Fatalf("request %d: %d, want %d", i, r.status, want)
		}
	}
	p.waitLog(`"msg":"httplimit: refused requests"`, 10*time.Second)
	var logged string
	for line := range strings.Lines(p.logs()) {
		var rec struct {
			Msg     string
			TopKeys map[string]struct{ Key string } `json:"top_keys"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "httplimit: refused requests" {
			logged = rec.TopKeys["1"].Key
		}
	}
	var st struct {
		HeavyKeys []struct{ Key string } `json:"heavy_keys"`
	}
	if err := json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st); err != nil || len(st.HeavyKeys) != 1 {
		t.Fatalf("status.json: %v %+v", err, st)
	}
	code, list, errs := sluiceKeys("list", "--admin", admin)
	if code != 0 {
		t.Fatalf("list: %d %s", code, errs)
	}
	shown := st.HeavyKeys[0].Key
	mask, ok := strings.CutPrefix(shown, "header:X-User=")
	if !ok || !regexp.MustCompile(`^key#[0-9a-f]{12}$`).MatchString(mask) || logged != shown || !strings.Contains(list, "  "+shown+"  ") {
		t.Fatalf("one key, three renderings:\nlog:    %q\nstatus: %q\nlist:\n%s", logged, shown, list)
	}
	for _, v := range []string{shown, mask} {
		code, out, errs := sluiceKeys("inspect", "--admin", admin, "api", "per-user", v)
		if code != 0 || !strings.Contains(out, "remaining 0; a request now would be refused") {
			t.Fatalf("inspect %s: %d\n%s%s", v, code, out, errs)
		}
	}
	if code, out, errs := sluiceKeys("reset", "--admin", admin, "api", "per-user", mask); code != 0 || !strings.Contains(out, "remaining 1") {
		t.Fatalf("reset %s: %d\n%s%s", mask, code, out, errs)
	}
	if r := get(t, p.url("gateway", "/"), "X-User", "ann-secret"); r.status != 200 {
		t.Fatalf("after the reset: %d, want 200", r.status)
	}
	unknown := "key#000000000000"
	if mask == unknown {
		unknown = "key#000000000001"
	}
	if code, _, errs := sluiceKeys("inspect", "--admin", admin, "api", "per-user", unknown); code != 1 || !strings.Contains(errs, "400: limit \"per-user\": value 1 (header:X-User) is the mask "+unknown+", which this server has not shown lately") {
		t.Fatalf("an unknown mask: %d %s", code, errs)
	}
	if logs := p.logs(); strings.Contains(logs, "ann-secret") || strings.Contains(list, "ann-secret") {
		t.Fatalf("the value was written:\n%s\n%s", logs, list)
	}
}

// TestKeysOneMaskRLS: a key the Envoy rate limit service refuses reads the
// same in its refusal log and on the status page: the descriptor entry's
// key, and its value masked.
func TestKeysOneMaskRLS(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), `domain: edge
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
	p := start(t, nil, "--rls", dir)
	c := rlsClient(t, p.addrs["grpc"])
	for range 2 {
		if _, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{descriptor("remote_address", "10.0.0.1")}}); err != nil {
			t.Fatal(err)
		}
	}
	p.waitLog(`"msg":"rls: refused requests"`, 10*time.Second)
	var logged string
	for line := range strings.Lines(p.logs()) {
		var rec struct {
			Msg     string
			TopKeys map[string]struct{ Key string } `json:"top_keys"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "rls: refused requests" {
			logged = rec.TopKeys["1"].Key
		}
	}
	var st struct {
		HeavyKeys []struct{ Key string } `json:"heavy_keys"`
	}
	if err := json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st); err != nil || len(st.HeavyKeys) != 1 {
		t.Fatalf("status.json: %v %+v", err, st)
	}
	shown := st.HeavyKeys[0].Key
	if !regexp.MustCompile(`^remote_address=key#[0-9a-f]{12}$`).MatchString(shown) || logged != shown {
		t.Fatalf("one key, two renderings:\nlog:    %q\nstatus: %q", logged, shown)
	}
}
