package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server/rls"
)

// The files under testdata/peer are envoyproxy/ratelimit's own, copied
// unchanged as input data from its repository at commit
// f2fb15770f7fd1c88ca6c3a1b58ee513917ace96: test/config/*.yaml (peer/config),
// test/integration/runtime/current/ratelimit (peer/runtime, the runtime
// directory of its integration tests, whose config/ subdirectory it reads)
// and examples/ratelimit/config (peer/example, its docker-compose example),
// and the configuration examples of its README.md (peer/readme, one file
// per example, in README order; the first, a template of the fields, is
// left out).
// The verdicts below are that service's, as its test/config/config_test.go
// asserts them.

// TestPeerFixtures: every upstream fixture gets the upstream verdict.
func TestPeerFixtures(t *testing.T) {
	const c = "testdata/peer/config/"
	cases := []struct {
		name  string
		paths []string
		merge bool
		want  string // "" loads; otherwise a part of the error
	}{
		{"basic_config", []string{c + "basic_config.yaml"}, false, ""},
		{"metadata", []string{c + "metadata.yaml"}, false, ""},
		{"shadowmode_config", []string{c + "shadowmode_config.yaml"}, false, ""},
		{"share_threshold", []string{c + "share_threshold.yaml"}, false, ""},
		{"wildcard", []string{c + "wildcard.yaml"}, false, ""},
		{"duplicate_domain alone", []string{c + "duplicate_domain.yaml"}, false, ""},
		{"merge_domain_key1+2 merged", []string{c + "merge_domain_key1.yaml", c + "merge_domain_key2.yaml"}, true, ""},
		{"integration runtime directory", []string{"testdata/peer/runtime/config"}, false, ""},
		{"docker-compose example directory", []string{"testdata/peer/example"}, false, ""},
		{"duplicate_domain after basic_config", []string{c + "basic_config.yaml", c + "duplicate_domain.yaml"}, false, `domain "test-domain" is already defined`},
		{"merge_domain_key1+2 not merged", []string{c + "merge_domain_key1.yaml", c + "merge_domain_key2.yaml"}, false, "is already defined"},
		{"merge_domain_key1 twice, merged", []string{c + "merge_domain_key1.yaml", c + "merge_domain_key1.yaml"}, true, "also defined in"},
		{"bad_limit_unit", []string{c + "bad_limit_unit.yaml"}, false, `unknown unit "foo"`},
		{"bad_yaml", []string{c + "bad_yaml.yaml"}, false, "bad_yaml.yaml:"},
		{"duplicate_key", []string{c + "duplicate_key.yaml"}, false, "appears twice in the same list"},
		{"empty_domain", []string{c + "empty_domain.yaml"}, false, "domain: missing"},
		{"empty_key", []string{c + "empty_key.yaml"}, false, "key: missing"},
		{"misspelled_key", []string{c + "misspelled_key.yaml"}, false, "unknown field"},
		{"misspelled_key2", []string{c + "misspelled_key2.yaml"}, false, "unknown field"},
		{"non_map_list", []string{c + "non_map_list.yaml"}, false, "non_map_list.yaml:"},
		{"non_string_key", []string{c + "non_string_key.yaml"}, false, "unknown field"},
		{"replaces_empty", []string{c + "replaces_empty.yaml"}, false, "must not be empty"},
		{"replaces_self", []string{c + "replaces_self.yaml"}, false, "own name"},
		{"unlimited_with_unit", []string{c + "unlimited_with_unit.yaml"}, false, "an unlimited rate_limit takes no unit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := rls.LoadConfigWith(rls.LoadOptions{MergeDomains: tc.merge}, tc.paths...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("upstream loads it; sluice: %v", err)
			case tc.want == "" && len(cfg.Domains()) == 0:
				t.Fatal("no domain loaded")
			case tc.want != "" && err == nil:
				t.Fatalf("upstream refuses it; sluice loads %s", cfg)
			case tc.want != "" && (!errors.Is(err, rls.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestPeerLooseShapes: what envoyproxy/ratelimit loads (its
// validateYamlKeys checks the keys of every level against one list, and
// yaml.v2 decodes leniently) loads in sluice, with a warning where
// sluice's strict reading would refuse it; what it refuses stays refused.
func TestPeerLooseShapes(t *testing.T) {
	const head = "domain: d\ndescriptors:\n  - key: k\n"
	cases := []struct {
		name, body string
		warns      int
		err        string // "" loads
	}{
		{"value_to_metric", "    value_to_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 0, ""},
		{"metadata", "    metadata: {name: a, tags: [x, {y: 1}]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 0, ""},
		{"quota_mode", "    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 0, ""},
		{"detailed_metric without rate_limit", "    detailed_metric: true\n", 1, ""},
		{"no requests_per_unit", "    rate_limit: {unit: second}\n", 1, ""},
		{"empty name", "    rate_limit: {unit: second, requests_per_unit: 1, name: \"\"}\n", 1, ""},
		{"empty rate_limit", "    rate_limit:\n", 1, ""},
		{"a field at another level", "    unit: second\n    rate_limit: {unit: second, requests_per_unit: 1, key: x}\n", 2, ""},
		{"a repeated field", "    value: a\n    value: b\n", 1, ""},
		{"unlimited with requests_per_unit", "    rate_limit: {unlimited: true, requests_per_unit: 5}\n", 1, ""},
		{"middle wildcard", "    value: a*b*c\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 0, ""},
		{"share_threshold without wildcard", "    value: a\n    share_threshold: true\n", 0, "applies only to a wildcard value"},
		{"metadata not a mapping", "    metadata: x\n", 0, "metadata: want a mapping"},
		{"a float at another level", "    unit: 1.5\n", 1, "is not a string, a whole number or a boolean"},
		{"a float value", "    value: 1.5\n", 0, "is not a string, a whole number or a boolean"},
		{"a whole number value", "    value: 15\n", 0, ""},
		{"a quoted number", "    rate_limit: {unit: second, requests_per_unit: \"5\"}\n", 0, "is quoted"},
		{"a quoted boolean", "    shadow_mode: 'true'\n", 0, "is quoted"},
		{"an unknown field at another level", "    unit: {colour: red}\n", 1, `unknown field "colour"`},
		{"unit_multiplier outside a rate_limit", "    unit_multiplier: 2\n", 0, "unknown field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := rls.ParseConfig("f.yaml", []byte(head+tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(cfg.Warnings()); got != tc.warns {
				t.Fatalf("%d warnings, want %d: %v", got, tc.warns, cfg.Warnings())
			}
		})
	}
}

// TestPeerWildcards: a '*' anywhere in a value matches any run of bytes,
// as upstream's TestWildcardConfig asserts on wildcard.yaml; share_threshold
// makes every value a wildcard matches count under one counter, while an
// exact value keeps its own (upstream's TestShareThreshold).
func TestPeerWildcards(t *testing.T) {
	data, err := os.ReadFile("testdata/peer/config/wildcard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	share, err := os.ReadFile("testdata/peer/config/share_threshold.yaml")
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, string(data), rls.Options{})
		cases := []struct {
			d    []string
			want string
		}{
			{[]string{"wild=foo1"}, "OK [OK 19/20m 45s]"},
			{[]string{"wild=foo2"}, "OK [OK 19/20m 45s]"}, // its own counter
			{[]string{"wild=bar"}, "OK [OK]"},
			{[]string{"midWild=barab"}, "OK [OK 19/20m 45s]"},
			{[]string{"midWild=barb"}, "OK [OK 19/20m 45s]"},
			{[]string{"midWild=bara"}, "OK [OK]"},
			{[]string{"multiWild=foo1bar2baz"}, "OK [OK 9/10m 45s]"},
			{[]string{"multiWild=foobazbar"}, "OK [OK]"},
			{[]string{"nestedWild=val1", "wild=goo1"}, "OK [OK 19/20m 45s]"},
		}
		for _, c := range cases {
			if got := brief(h.ask(t, "test-domain", 0, desc(c.d...))); got != c.want {
				t.Errorf("%v: got %s, want %s", c.d, got, c.want)
			}
		}
		h = start(t, b, string(share), rls.Options{})
		for i, c := range []struct{ d, want string }{
			{"files=files/a", "OK [OK 99/100m 45s]"},
			{"files=files/b", "OK [OK 98/100m 45s]"}, // shared with files/a
			{"file=test1", "OK [OK 49/50m 45s]"},     // exact: its own
			{"file=test2", "OK [OK 99/100m 45s]"},
			{"file=test3", "OK [OK 98/100m 45s]"},
		} {
			if got := brief(h.ask(t, "test-domain", 0, desc(c.d))); got != c.want {
				t.Errorf("share %d %s: got %s, want %s", i, c.d, got, c.want)
			}
		}
	})
}

// TestQuotaMode: a quota_mode limit over its limit says OVER_LIMIT for its
// descriptor but refuses the request only when every quota limit of the
// request is over, as in envoyproxy/ratelimit.
func TestQuotaMode(t *testing.T) {
	const config = `
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		forEachBackend(t, func(t *testing.T, b backend) {
			h := start(t, b, config, rls.Options{Counting: counting})
			steps := []string{
				"OK [OK 0/1m 45s, OK 1/2m 45s]",
				"OK [OVER_LIMIT 0/1m 45s, OK 0/2m 45s]", // one quota left: admitted
				"OVER_LIMIT [OVER_LIMIT 0/1m 45s, OVER_LIMIT 0/2m 45s]",
			}
			for i, want := range steps {
				if got := brief(h.ask(t, "q", 0, desc("a=x"), desc("b=x"))); got != want {
					t.Errorf("%s step %d: got %s, want %s", counting, i, got, want)
				}
			}
		})
	}
}

// TestPeerReadme: every configuration example of envoyproxy/ratelimit's
// README loads without a warning (one at a time: several share a domain), and its wildcard examples match as the
// README says.
func TestPeerReadme(t *testing.T) {
	files, _ := filepath.Glob("testdata/peer/readme/*.yaml")
	if len(files) != 16 {
		t.Fatalf("%d README examples, want 16", len(files))
	}
	for _, f := range files {
		cfg, err := rls.LoadConfig(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		} else if len(cfg.Warnings()) > 0 {
			t.Errorf("%s: %v", f, cfg.Warnings())
		}
	}
	for _, c := range []struct {
		file, domain string
		d            []string
		want         string
	}{
		{"block11.yaml", "example9", []string{"key1=value123"}, "OK [OK 19/20m 45s]"},
		{"block12.yaml", "example9", []string{"path=/api/v1/action"}, "OK [OK 19/20m 45s]"},
		{"block12.yaml", "example9", []string{"path=/api/v1/other"}, "OK [OK]"},
		{"block13.yaml", "example9", []string{"route=/api/1/resource/2/action"}, "OK [OK 19/20m 45s]"},
		{"block15.yaml", "example10_wildcard", []string{"user=u", "action=readAll", "resource=r"}, "OK [OK 99/100m 45s]"},
	} {
		data, err := os.ReadFile("testdata/peer/readme/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, backends[0], string(data), rls.Options{})
		if got := brief(h.ask(t, c.domain, 0, desc(c.d...))); got != c.want {
			t.Errorf("%s %v: got %s, want %s", c.file, c.d, got, c.want)
		}
	}
}
