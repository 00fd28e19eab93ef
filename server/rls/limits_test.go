package rls_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/server/rls"
)

// TestConfigLimits: every rate_limit that limits, with its descriptor path
// and shadow mode, in file order; unlimited ones are left out.
func TestConfigLimits(t *testing.T) {
	c, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: generic_key
    value: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: generic_key
    value: internal
    rate_limit: {unlimited: true}
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.Limits())
	want := "[{edge remote_address false} {edge generic_key=trial true} {edge path/user false}]"
	if got != want {
		t.Errorf("Limits() = %s, want %s", got, want)
	}
	if l := (*rls.Config)(nil).Limits(); l != nil {
		t.Errorf("a nil Config's limits: %v", l)
	}
}
