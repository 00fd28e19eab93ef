package policy_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/policy"
)

// A program that reloads a policy when its files change watches every
// file Files lists: the policy's and each file of prices it names. It asks
// again after each reload, since an edit of the policy can name others.
func ExampleHolder_Files() {
	dir, err := os.MkdirTemp("", "policy")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(`
rules:
  - name: llm
    limits:
      - {name: usd, key: global, algorithm: fixed_window, limit: 50000000, window: 1d, cost: {prices_file: prices.yaml}}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "prices.yaml"), []byte("prices: {gpt-4o: {input: 2.50, output: 10}}\n"), 0o644)
	h, err := policy.NewHolder(filepath.Join(dir, "policy.yaml"), policy.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range h.Files() {
		rel, _ := filepath.Rel(dir, f)
		fmt.Println(rel)
	}
	// Output:
	// policy.yaml
	// prices.yaml
}
