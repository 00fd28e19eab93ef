package policy_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llmusage"
	"github.com/sluicehq/sluice/policy"
)

const pricedPolicy = `
rules:
  - name: llm
    limits:
      - name: usd
        key: header:X-Tenant
        algorithm: fixed_window
        limit: 50000000
        window: 1mo
        timezone: Europe/Berlin
        cost: {prices_file: prices.yaml}
`

func TestPricesFile(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(pricedPolicy), 0o644)
	os.WriteFile(filepath.Join(dir, "prices.yaml"), []byte("prices:\n  gpt-4o: {input: 2.50, output: 10}\ndefault_price: {input: 15, output: 75}\n"), 0o644)
	p, err := policy.Load(pol, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps := p.Rules[0].Limits[0].Late().Tokens.Prices
	if got, _ := ps.Of("gpt-4o"); got != (llmusage.Price{Input: 2_500_000, Output: 10_000_000}) {
		t.Errorf("gpt-4o: %+v", got)
	}
	if got, ok := ps.Of("other"); !ok || got.Output != 75_000_000 {
		t.Errorf("default: %+v %v", got, ok)
	}

	os.WriteFile(filepath.Join(dir, "prices.yaml"), []byte("prices:\n  gpt-4o: {input: cheap, output: 10}\nmodels: []\n"), 0o644)
	_, err = policy.Load(pol, policy.Options{})
	for _, want := range []string{
		filepath.Join(dir, "prices.yaml") + `:2: rule "llm": limit "usd": cost.prices.gpt-4o.input: "cheap": want a price`,
		filepath.Join(dir, "prices.yaml") + `:3: rule "llm": limit "usd": unknown field "models"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %s", err, want)
		}
	}
	os.Remove(filepath.Join(dir, "prices.yaml"))
	if _, err = policy.Load(pol, policy.Options{}); err == nil || !strings.Contains(err.Error(), "cost.prices_file") {
		t.Errorf("a missing prices file: %v", err)
	}
}

// TestHolderFiles: a holder lists the policy's file and each file of
// prices it names, once, in order; after a load that failed, those that
// load named.
func TestHolderFiles(t *testing.T) {
	dir := t.TempDir()
	pol, a, b := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "a.yaml"), filepath.Join(dir, "sub", "b.yaml")
	two := func(first, second string) string {
		return "rules:\n  - name: llm\n    limits:\n" +
			"      - {name: one, key: global, algorithm: fixed_window, limit: 1000000, window: 1h, cost: {prices_file: " + first + "}}\n" +
			"      - {name: two, key: global, algorithm: fixed_window, limit: 1000000, window: 1h, cost: {prices_file: " + second + "}}\n" +
			"      - {name: three, key: global, algorithm: fixed_window, limit: 1000000, window: 1h, cost: {prices_file: " + first + "}}\n"
	}
	os.WriteFile(pol, []byte(two("a.yaml", "a.yaml")), 0o644)
	os.WriteFile(a, []byte("prices: {m: {input: 1, output: 2}}\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	h, err := policy.NewHolder(pol, policy.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		policy string
		want   []string
	}{
		{"", []string{pol, a}},
		{two("sub/b.yaml", "a.yaml"), []string{pol, b, a}}, // b.yaml is missing: the load fails, the holder names it
		{two("sub/b.yaml", "sub"), []string{pol, b}},       // a directory is refused, not listed
		{"rules: [", []string{pol}},                        // a policy that does not parse names none
	}
	for i, s := range steps {
		if s.policy != "" {
			os.WriteFile(pol, []byte(s.policy), 0o644)
			if h.Reload() == nil {
				t.Errorf("step %d: the reload did not fail", i)
			}
		}
		if got := h.Files(); !slices.Equal(got, s.want) {
			t.Errorf("step %d: Files() = %q, want %q", i, got, s.want)
		}
	}
}
