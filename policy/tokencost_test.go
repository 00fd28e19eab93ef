package policy_test

import (
	"os"
	"path/filepath"
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
