package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "gateway: ':9000'\nstore:\n  type: redis\n  redis:\n    addrs: [10.0.0.1:6379]\n    timeout: 250ms\n")
	cfg, err := server.LoadConfig(good, server.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway != ":9000" || cfg.Admin != server.DefaultAdmin || time.Duration(cfg.Store.Redis.Timeout) != 250*time.Millisecond || cfg.Validate() != nil {
		t.Errorf("loaded %+v (validate: %v)", cfg, cfg.Validate())
	}
	empty := write("empty.yaml", "")
	if cfg, err := server.LoadConfig(empty, server.Defaults()); err != nil || cfg.Gateway != server.DefaultGateway {
		t.Errorf("an empty file: %+v, %v; want the defaults", cfg, err)
	}
	for body, want := range map[string]string{
		"gatway: ':1'\n":                   "bad.yaml:1: unknown field gatway",
		"shutdown_timeout: soon\n":         `bad.yaml:1: "soon" is not a duration`,
		"store:\n  redis:\n    db: many\n": "bad.yaml:3: cannot unmarshal",
	} {
		p := write("bad.yaml", body)
		if _, err := server.LoadConfig(p, server.Defaults()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadConfig(%q) = %v, want an error containing %q", body, err, want)
		}
	}
	if _, err := server.LoadConfig(filepath.Join(dir, "missing.yaml"), server.Defaults()); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestConfigSetAndValidate(t *testing.T) {
	cfg := server.Defaults()
	for _, c := range []struct{ name, value, want string }{
		{"watch", "maybe", `--watch="maybe": want true or false`},
		{"max-keys", "lots", "want a whole number"},
		{"redis-mode", "ring", "want standalone, cluster or sentinel:MASTER"},
		{"shutdown-timeout", "10 parsecs", "--shutdown-timeout"},
		{"nope", "1", "unknown setting"},
		{"max-conns", "lots", "want a whole number, or -1 for no bound"},
		{"read-timeout", "briefly", "--read-timeout"},
	} {
		if err := cfg.Set(c.name, "--"+c.name, c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %q) = %v, want %q", c.name, c.value, err, c.want)
		}
	}
	cfg.Set("redis-mode", "", "sentinel:mymaster")
	if cfg.Store.Redis.MasterName != "mymaster" || cfg.Store.Redis.Cluster {
		t.Errorf("sentinel mode: %+v", cfg.Store.Redis)
	}
	bad := server.Defaults()
	bad.Gateway, bad.API, bad.GRPC = "", "", ""
	bad.Admin = "localhost"
	bad.Store.Type = "redis"
	bad.Store.Redis.Addrs = []string{"a:1", "rediss://b:2", "rediss://c"}
	bad.Store.Redis.Password, bad.Store.Redis.PasswordFile = "p", "f"
	bad.Store.Redis.Cluster, bad.Store.Redis.MasterName = true, "m"
	bad.Store.Redis.OnError = "sometimes"
	bad.MaxConns = -2
	bad.Timeouts.Idle = -1
	bad.Auth.Listeners = []string{"gateway"}
	bad.TLS = server.TLSConfig{CertFile: "c.pem", Listeners: []string{"gateway", "web"}, ClientAuth: []string{"api"}}
	err := bad.Validate()
	for _, want := range []string{
		`admin: "localhost": want host:port`,
		"gateway: gateway, api and grpc are all off",
		"store.redis.cluster: cluster and master_name (Sentinel) exclude each other",
		`store.redis.addrs: "rediss://c": want host:port, redis://host:port or rediss://host:port (TLS)`,
		"store.redis.password_file: password and password_file exclude each other",
		`store.redis.on_error: "sometimes": want open, closed or fallback`,
		"max_conns: want a positive number, 0 for the default or -1 for no bound (got -2)",
		"timeouts.idle: must not be negative",
		"tls: cert_file and key_file go together",
		`auth.listeners: "gateway": want api or admin`,
		"auth.listeners: needs auth.tokens_file",
		`tls.listeners: "web": want gateway, api, grpc or admin`,
		"tls.client_auth: needs client_ca_file",
		`tls.client_auth: "api" does not serve TLS`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}

// TestShowKeysSetting: show_keys is off by default and set by the file,
// SLUICE_SHOW_KEYS or the flag's setting, which takes true or false only.
func TestShowKeysSetting(t *testing.T) {
	cfg := server.Defaults()
	if cfg.ShowKeys {
		t.Fatal("keys shown by default")
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("show_keys: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg, err := server.LoadConfig(path, cfg); err != nil || !cfg.ShowKeys {
		t.Errorf("file: %v, %v", cfg.ShowKeys, err)
	}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { return "true", k == "SLUICE_SHOW_KEYS" }); err != nil || !cfg.ShowKeys {
		t.Errorf("SLUICE_SHOW_KEYS=true: %v, %v", cfg.ShowKeys, err)
	}
	if err := cfg.Set("show-keys", "--show-keys", "maybe"); err == nil || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf("--show-keys=maybe: %v", err)
	}
}

// TestMaxHeaderBytesSetting: max_header_bytes is set by the file,
// SLUICE_MAX_HEADER_BYTES and the flag's setting, 0 is the default, and a
// value outside 4 KiB to 16 MiB is refused naming the field.
func TestMaxHeaderBytesSetting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("max_header_bytes: 16384\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := server.LoadConfig(path, server.Defaults())
	if err != nil || cfg.MaxHeaderBytes != 16384 {
		t.Errorf("file: %d, %v", cfg.MaxHeaderBytes, err)
	}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { return "32768", k == "SLUICE_MAX_HEADER_BYTES" }); err != nil || cfg.MaxHeaderBytes != 32768 {
		t.Errorf("SLUICE_MAX_HEADER_BYTES=32768: %d, %v", cfg.MaxHeaderBytes, err)
	}
	if err := cfg.Set("max-header-bytes", "--max-header-bytes", "64KiB"); err == nil || !strings.Contains(err.Error(), "want a whole number of bytes") {
		t.Errorf("--max-header-bytes=64KiB: %v", err)
	}
	for n, ok := range map[int]bool{0: true, 4096: true, 16 << 20: true, 4095: false, 16<<20 + 1: false, -1: false} {
		cfg := server.Defaults()
		cfg.MaxHeaderBytes = n
		err := cfg.Validate()
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "max_header_bytes: want 4096 (4 KiB) to 16777216 (16 MiB) bytes")) {
			t.Errorf("max_header_bytes %d: %v", n, err)
		}
	}
}
