package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server"
)

// TestReadmeRunIt keeps README's "Run it" true: the addresses it curls are
// sluice serve's defaults, and its decision API example is answered.
func TestReadmeRunIt(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, runIt, ok := strings.Cut(readme, "## Run it")
	if !ok {
		t.Fatal(`README.md has no "## Run it" section`)
	}
	runIt, _, _ = strings.Cut(runIt, "\n## ")
	if !strings.Contains(runIt, "go run ./cmd/sluice serve") {
		t.Errorf("Run it does not start sluice serve")
	}
	for name, addr := range map[string]string{"gateway": server.DefaultGateway, "api": server.DefaultAPI, "admin": server.DefaultAdmin} {
		if !strings.Contains(runIt, "http://"+addr+"/") {
			t.Errorf("Run it does not use the default %s address %s", name, addr)
		}
	}
	_, body, ok := strings.Cut(runIt, "/v1/check -d '")
	if !ok {
		t.Fatal("Run it has no decision API example")
	}
	body, _, _ = strings.Cut(body, "'")
	p := start(t, nil)
	r := do(t, "POST", p.url("api", "/v1/check"), body)
	var a struct{ Allowed bool }
	if err := json.Unmarshal([]byte(r.body), &a); r.status != 200 || err != nil || !a.Allowed {
		t.Errorf("README's decision API example: %d %s", r.status, r.body)
	}
}
