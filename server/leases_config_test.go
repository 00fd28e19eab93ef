package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// TestLeasesConfig: store.redis.leases is read from the file, each field
// as documented, and a negative setting is an error naming the field;
// --redis-leases (SLUICE_REDIS_LEASES) turns it on.
func TestLeasesConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "leases.yaml")
	body := "store:\n  type: redis\n  redis:\n    addrs: [10.0.0.1:6379]\n    leases: {enabled: true, traffic: 20ms, share: 8, hold: 1s, keys: 500}\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := server.LoadConfig(p, server.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Store.Redis.Leases
	if !l.Enabled || time.Duration(l.Traffic) != 20*time.Millisecond || l.Share != 8 || time.Duration(l.Hold) != time.Second || l.Keys != 500 {
		t.Errorf("leases %+v", l)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	off := server.Defaults()
	if err := off.Set("redis-leases", "--redis-leases", "maybe"); err == nil || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf(`Set("redis-leases", "maybe") = %v`, err)
	}
	if err := off.Set("redis-leases", "--redis-leases", "true"); err != nil || !off.Store.Redis.Leases.Enabled {
		t.Errorf(`Set("redis-leases", "true") = %v, enabled %v`, err, off.Store.Redis.Leases.Enabled)
	}
	cfg.Store.Redis.Leases.Share = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "store.redis.leases: no setting is negative") {
		t.Errorf("Validate() with share -1 = %v", err)
	}
}
