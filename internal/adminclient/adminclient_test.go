package adminclient

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminURL: HOST:PORT is http; a listen address without a host is
// asked on loopback; anything but http and https is refused.
func TestAdminURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8082":         "http://127.0.0.1:8082",
		":8082":                  "http://127.0.0.1:8082",
		"0.0.0.0:8082":           "http://127.0.0.1:8082",
		"[::]:8082":              "http://127.0.0.1:8082",
		"https://admin:9/status": "https://admin:9",
	} {
		if u, err := adminURL(in); err != nil || u.String() != want {
			t.Errorf("%q: %v, %v; want %s", in, u, err, want)
		}
	}
	for _, in := range []string{"ftp://x:1", "http://", "::::"} {
		if _, err := adminURL(in); err == nil || !strings.Contains(err.Error(), "want HOST:PORT or https://HOST:PORT") {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// TestReadToken: the first line neither blank nor a comment, trimmed; a
// file of none is an error that says how to write one.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "good"), filepath.Join(dir, "empty")
	os.WriteFile(good, []byte("# admin\n\n  s3cret  \nother\n"), 0o600)
	os.WriteFile(empty, []byte("# none\n"), 0o600)
	if tok, err := readToken(good); err != nil || tok != "s3cret" {
		t.Errorf("%q, %v", tok, err)
	}
	if _, err := readToken(empty); err == nil || !strings.Contains(err.Error(), "no token in it") {
		t.Errorf("empty: %v", err)
	}
	if _, err := readToken(filepath.Join(dir, "missing")); err == nil || !strings.HasPrefix(err.Error(), "--token-file: ") {
		t.Errorf("missing: %v", err)
	}
}

// TestClient: Key and Status send the token and the key's parts (as a
// query to inspect, a form to reset); answers other than a 200 say what
// to do; an answer that is not the admin's JSON says so.
func TestClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.ParseForm()
		switch {
		case r.URL.Path == "/status.json":
			w.Write([]byte(`{"policy": "p.yaml", "rules": [{"name": "api", "limits": [{"name": "per-ip", "key": "ip", "algorithm": "gcra(5/s, burst 5)"}]}]}`))
		case r.URL.Path == "/admin/keys" && r.Method == "GET" && r.Form.Get("limit") == "per-ip" && r.Form["value"][0] == "ann":
			w.Write([]byte(`{"rule": "api", "limit": "per-ip", "values": ["ann"], "remaining": 4, "allowed": true}`))
		case r.URL.Path == "/admin/keys/reset" && r.Method == "POST" && r.PostForm.Get("limit") == "per-ip":
			w.Write([]byte(`{"reset": true}`))
		case r.URL.Path == "/admin/keys":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": "the policy has no limit \"x\""}`))
		default:
			w.Write([]byte("<html>gateway</html>"))
		}
	}))
	defer srv.Close()
	t.Setenv("SLUICE_ADMIN_TOKEN", "tok")
	kc, err := New(srv.URL, "", TLSFiles{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st StatusAnswer
	if body, err := kc.Status(); err != nil || kc.Decode(body, &st) != nil || st.Policy != "p.yaml" || st.Rules[0].Limits[0].Name != "per-ip" {
		t.Errorf("status: %+v, %v", st, err)
	}
	var ka KeyAnswer
	if body, err := kc.Key("GET", "/admin/keys", []string{"api", "per-ip", "ann"}); err != nil || kc.Decode(body, &ka) != nil || ka.Remaining != 4 || !ka.Allowed {
		t.Errorf("inspect: %+v, %v", ka, err)
	}
	if body, err := kc.Key("POST", "/admin/keys/reset", []string{"api", "per-ip", "ann"}); err != nil || kc.Decode(body, &ka) != nil || !ka.Reset {
		t.Errorf("reset: %+v, %v", ka, err)
	}
	if _, err := kc.Key("GET", "/admin/keys", []string{"api", "x", "ann"}); err == nil || !strings.Contains(err.Error(), `404: the policy has no limit "x"; 'sluice keys list' shows its rules and limits`) {
		t.Errorf("no such limit: %v", err)
	}
	if body, err := kc.Key("GET", "/elsewhere", []string{"a", "b", "c"}); err != nil || !strings.Contains(kc.Decode(body, &ka).Error(), "not sluice's admin JSON") {
		t.Errorf("not the admin: %v", err)
	}
	kc.token = ""
	if _, err := kc.Status(); err == nil || !strings.Contains(err.Error(), "401: ") || !strings.Contains(err.Error(), "asks for a token") {
		t.Errorf("no token: %v", err)
	}
}

// TestTLSFiles: a certificate goes with its key; a CA file must hold a
// certificate.
func TestTLSFiles(t *testing.T) {
	if _, err := (TLSFiles{Cert: "c.pem"}).Config(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("cert alone: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte("not a certificate"), 0o600)
	if _, err := (TLSFiles{CA: ca}).Config(); err == nil || !strings.Contains(err.Error(), "no PEM certificate in it") {
		t.Errorf("bad CA: %v", err)
	}
	if c, err := (TLSFiles{}).Config(); err != nil || c.MinVersion == 0 {
		t.Errorf("none: %v", err)
	}
}
