package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/server"
)

// TestJWKSFailureInServerLog: a policy's key set that cannot be fetched is
// logged by the server's own logger (where an operator reads sluice
// serve's logs), not by the process's default one.
func TestJWKSFailureInServerLog(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(idp.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	policy := `
jwt: {jwks_url: "` + idp.URL + `", issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    limits:
      - {name: per-user, key: jwt:sub, on_missing: refuse, algorithm: fixed_window, rate: 3/h}
`
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	cfg := server.Defaults()
	cfg.Gateway, cfg.API, cfg.GRPC, cfg.Admin, cfg.Policy = "", "127.0.0.1:0", "", "", path
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	tok := jwttest.NewKey(t, "k1").Token(t, "alice", "pro")
	body := fmt.Sprintf(`{"request": {"path": "/x", "ip": "203.0.113.7", "headers": {"Authorization": "Bearer %s"}}}`, tok)
	resp, err := http.Post("http://"+srv.Addr("api")+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// the fetch a token with an unknown key starts runs in the background
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "jwt: the key set could not be fetched; the last good one stays"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed fetch in the server's log within 10s; it has:\n%s", logs.String())
		}
	}
}
