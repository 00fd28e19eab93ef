package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// pricesPolicy is a money budget: each tenant has a billion micro-units,
// each call costs the price of its prompt and output at the prices of the
// file prices (or, if prices starts with "{", those prices inline).
func pricesPolicy(prices string) string {
	cost := "{prices_file: " + prices + "}"
	if strings.HasPrefix(prices, "{") {
		cost = "{prices: " + prices + "}"
	}
	return `
rules:
  - name: llm
    match: {methods: [POST], path: /v1/}
    limits:
      - {name: usd, key: header:X-Tenant, algorithm: fixed_window, limit: 1000000000, window: 1h, cost: ` + cost + `}
`
}

// pricesOf is a file of prices: model m at out per million output tokens.
func pricesOf(out int) string { return sprintf("prices: {m: {input: 1, output: %d}}\n", out) }

// tenants numbers the tenants charged checks for, so that each is new.
var tenants atomic.Int64

// charged is what one /v1/check of a call to model m of at most 1,000
// output tokens (and an empty prompt) costs a new tenant, read from the
// budget it leaves.
func charged(t *testing.T, p *proc) int64 {
	t.Helper()
	tenant := sprintf("t%d", tenants.Add(1))
	r := do(t, "POST", p.url("api", "/v1/check"), sprintf(`{"request": {"method": "POST", "path": "/v1/chat", "headers": {"X-Tenant": %q}}, "llm": {"model": "m", "max_tokens": 1000, "prompt_bytes": 0}}`, tenant))
	var v struct {
		Decisions []struct {
			Name      string
			Remaining int64
		}
	}
	if err := json.Unmarshal([]byte(r.body), &v); err != nil || r.status != 200 || len(v.Decisions) != 1 {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	return 1_000_000_000 - v.Decisions[0].Remaining
}

// logLines are the JSON log lines of p whose msg is msg, from line from on.
func logLines(t *testing.T, p *proc, from int, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(p.logs(), "\n")[from:] {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestPricesFileReload: sluice serve reloads when a file of prices alone
// changes (an editor's save): the next call is charged the new price. A
// broken file keeps the old prices and logs the file and line; a reload
// that stops naming the file stops watching it.
func TestPricesFileReload(t *testing.T) {
	dir := t.TempDir()
	pol, prices := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "prices.yaml")
	writeFile(t, pol, pricesPolicy("prices.yaml"))
	writeFile(t, prices, pricesOf(10))
	p := start(t, nil, "--policy", pol)
	reloads := func(result string) float64 {
		return metric(t, p, `sluice_config_reloads_total{config="policy",result="`+result+`"}`)
	}
	if c := charged(t, p); c != 10_000 {
		t.Fatalf("at 10 per million output tokens, 1,000 cost %d, want 10,000", c)
	}

	writeFile(t, prices+".tmp", pricesOf(20)) // an editor's save: a new file renamed over the old
	if err := os.Rename(prices+".tmp", prices); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new prices to load", func() bool { return reloads("ok") >= 2 })
	if c := charged(t, p); c != 20_000 {
		t.Errorf("after the price went to 20: charged %d, want 20,000", c)
	}
	if l := logLines(t, p, 0, "config files changed: reloading"); len(l) != 1 || !strings.Contains(sprintf("%v", l[0]["paths"]), prices) {
		t.Errorf("the reload's lines: %v, want one naming %s", l, prices)
	}

	writeFile(t, prices, "prices: {m: {input: 1, output: cheap}}\n")
	waitFor(t, "the broken prices to be refused", func() bool { return reloads("error") >= 1 })
	if c := charged(t, p); c != 20_000 {
		t.Errorf("after a broken file of prices: charged %d, want the old price's 20,000", c)
	}
	failed := logLines(t, p, 0, "policy: reload failed; the previous policy stays active")
	if len(failed) != 1 || !strings.Contains(sprintf("%v", failed[0]["err"]), prices+`:1: rule "llm": limit "usd": cost.prices.m.output: "cheap": want a price`) {
		t.Errorf("the failed reload's lines: %v, want one naming %s:1 and the field", failed, prices)
	}

	// A reload that drops the file: its later edits reload nothing. The
	// policy's edit comes after the file's, so by the time it applies a
	// reload of the file's edit, alone or with it, would show.
	writeFile(t, pol, pricesPolicy("{m: {input: 1, output: 30}}"))
	waitFor(t, "the inline prices to load", func() bool { return charged(t, p) == 30_000 })
	ok, from := reloads("ok"), len(strings.Split(p.logs(), "\n"))-1
	writeFile(t, prices, pricesOf(40))
	writeFile(t, pol, pricesPolicy("{m: {input: 1, output: 50}}"))
	waitFor(t, "the policy's edit to load", func() bool { return charged(t, p) == 50_000 })
	if got := reloads("ok"); got != ok+1 {
		t.Errorf("%v reloads after editing the dropped file and the policy, want 1", got-ok)
	}
	for _, l := range logLines(t, p, from, "config files changed: reloading") {
		if strings.Contains(sprintf("%v", l["paths"]), prices) {
			t.Errorf("the dropped file is still watched: %v", l)
		}
	}
}

// TestPricesFileConfigMap: a file of prices mounted from a Kubernetes
// ConfigMap of its own (the file a symlink through ..data, swapped
// atomically to a new directory) reloads at each swap, the policy's own
// directory unchanged.
func TestPricesFileConfigMap(t *testing.T) {
	dir := t.TempDir()
	pol, cm := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "prices")
	version := func(n, price int) {
		t.Helper()
		v := sprintf("..v%d", n)
		mkdir(t, filepath.Join(cm, v))
		writeFile(t, filepath.Join(cm, v, "prices.yaml"), pricesOf(price))
		if err := os.Symlink(v, filepath.Join(cm, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data")); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(cm, sprintf("..v%d", n-1)))
	}
	version(1, 10)
	if err := os.Symlink(filepath.Join("..data", "prices.yaml"), filepath.Join(cm, "prices.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, pol, pricesPolicy(filepath.Join(cm, "prices.yaml")))
	p := start(t, nil, "--policy", pol)
	if c := charged(t, p); c != 10_000 {
		t.Fatalf("at 10 per million output tokens, 1,000 cost %d, want 10,000", c)
	}
	for i, price := range []int{60, 70} {
		version(i+2, price)
		waitFor(t, sprintf("swap %d to load", i+1), func() bool {
			return metric(t, p, `sluice_config_reloads_total{config="policy",result="ok"}`) >= float64(i+2)
		})
		if c := charged(t, p); c != int64(price)*1000 {
			t.Errorf("after swap %d to price %d: charged %d", i+1, price, c)
		}
	}
}
