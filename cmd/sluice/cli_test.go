package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpOnStdout: every command's --help goes to standard output with
// exit 0 and shows defaults; nothing is written to standard error.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // in the help
	}{
		{[]string{"serve", "--help"}, []string{"--gateway VALUE", "(default 127.0.0.1:8080)", "(default memory)", "(default 10s)", "(default info)"}},
		{[]string{"check", "--help"}, []string{"--kind STRING", "(default auto)", "(default 1s)"}},
		{[]string{"simulate", "--help"}, []string{"--slot STRING", "(default 500ms)", "(default 10/s)", "--width INT"}},
		{[]string{"replay", "--help"}, []string{"--log STRING", "--policy STRING", "(default auto)", "(default 100000)", "(default 5)"}},
		{[]string{"suggest", "--help"}, []string{"--percentile FLOAT", "(default 99)", "(default 0.8)", "(default sliding_window)"}},
		{[]string{"keys", "--help"}, []string{"sluice keys inspect [flags] RULE LIMIT VALUE...", "--admin ADDR", "(default 127.0.0.1:8082)", "--token-file FILE"}},
		{[]string{"help", "simulate"}, []string{"Usage: sluice simulate"}},
		{[]string{"help"}, []string{"sluice simulate [flags]", "sluice replay [flags]", "sluice suggest [flags]"}},
	} {
		stdout, stderr, code := runSluice(t, c.args...)
		if code != 0 || stderr != "" {
			t.Errorf("sluice %s: exit %d, stderr %q; want 0 and nothing", strings.Join(c.args, " "), code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("sluice %s: no %q in:\n%s", strings.Join(c.args, " "), w, stdout)
			}
		}
	}
}

// TestFlagErrors: a mistyped flag or command gets a short error naming
// the closest one and pointing at --help, on stderr, exit 2.
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--gatway", "x"}, "sluice serve: unknown flag --gatway; did you mean --gateway?\nRun 'sluice serve --help' for every flag.\n"},
		{[]string{"serve", "--redis-adrs", "x"}, "did you mean --redis-addrs?"},
		{[]string{"simulate", "--trafic", "5"}, "did you mean --traffic?"},
		{[]string{"simulate", "--burst", "many"}, "sluice simulate: --burst=\"many\": not a valid whole number\n"},
		{[]string{"simulate", "--slot"}, "--slot needs a value"},
		{[]string{"check", "--knd", "policy", "x"}, "did you mean --kind?"},
		{[]string{"replay", "--polcy", "x"}, "did you mean --policy?"},
		{[]string{"suggest", "--safe_rate", "5/s"}, "did you mean --safe-rate?"},
		{[]string{"sugest"}, "did you mean suggest?"},
		{[]string{"key", "list"}, "did you mean keys?"},
		{[]string{"keys", "list", "--tokenfile", "x"}, "did you mean --token-file?"},
		{[]string{"overrides", "sett"}, "unknown operation \"sett\"; did you mean set?"},
		{[]string{"overrides", "set", "per-tenant"}, "want LIMIT KEY, got 1 argument(s)"},
		{[]string{"overrides", "list", "x"}, "unexpected argument \"x\""},
		{[]string{"overrides"}, "name an operation: set, list or delete"},
		{[]string{"overrides", "set", "l", "k", "--scael", "2"}, "did you mean --scale?"},
		{[]string{"check", "--zzzzzz"}, "unknown flag --zzzzzz\nRun 'sluice check --help'"},
		{[]string{"simulat"}, "sluice: unknown command \"simulat\"; did you mean simulate?\nRun 'sluice help' for the commands.\n"},
	} {
		stdout, stderr, code := runSluice(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") > 3 {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2, at most 3 lines with %q", strings.Join(c.args, " "), code, stdout, stderr, c.want)
		}
	}
}

// runSluice runs sluice as a real process.
func runSluice(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := execSluice(args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatalf("sluice %s did not run", strings.Join(args, " "))
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// TestCheckLocatesYAMLError: yaml reports a mis-indented line at the
// start of its block ("bad.yaml:4: did not find expected '-' indicator"
// for line 10); sluice check adds the likely line and what to do.
func TestCheckLocatesYAMLError(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "# the API's limits\nrules:\n  - name: api\n    limits:\n      - name: per-ip\n        key: ip\n        algorithm: gcra\n        rate: 5/s\n      - name: per-user\n       key: header:X-User\n        algorithm: gcra\n        rate: 1/s\n")
	out, _, code := runSluice(t, "check", bad)
	want := bad + ":4: did not find expected '-' indicator; likely at line 10: indented 7 spaces, between the 8 of the lines before it and the 6 of their parent: YAML nests by indentation, so align it with the lines of its level"
	if code != exitInvalid || !strings.Contains(out, want) {
		t.Errorf("exit %d:\n%s\nwant %q", code, out, want)
	}
}
