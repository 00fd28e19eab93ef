package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// TestServeFlagsCoverSettings walks server.Settings: every setting has a
// flag with its help, or says why not; and a true-or-false flag is given
// alone.
func TestServeFlagsCoverSettings(t *testing.T) {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	defineSettingFlags(fs)
	for _, s := range server.Settings {
		f := fs.Lookup(s.Name)
		switch {
		case s.NoFlag != "":
			if f != nil {
				t.Errorf("--%s: a flag, though the setting says it has none (%s)", s.Name, s.NoFlag)
			}
			continue
		case f == nil:
			t.Errorf("setting %s (%s): no flag --%s", s.Name, s.Env, s.Name)
			continue
		case s.Help == "":
			t.Errorf("--%s: no help in its row of server.Settings", s.Name)
		}
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		if isBool := ok && b.IsBoolFlag(); isBool != s.Bool() {
			t.Errorf("--%s: given alone %v, but the setting is true-or-false: %v", s.Name, isBool, s.Bool())
		}
	}
}

// TestServeBoolFlagsAlone: docs/serve.md writes --redis-leases alone,
// which serve answered with "--redis-leases needs a value"; --max-delay,
// which check's message and help name, was no flag of serve. Both parse
// now, with =false turning a boolean off.
func TestServeBoolFlagsAlone(t *testing.T) {
	// The command line parses: serve goes on to validate, and stops at the
	// store it cannot use (exit 1), not at the flags (exit 2).
	_, errOut, code := runSluice(t, "serve", "--redis-leases", "--max-delay", "2s", "--redis-leases=false", "--store", "nope")
	if code != exitInvalid || !strings.Contains(errOut, `store.type: "nope"`) {
		t.Errorf("serve --redis-leases --max-delay 2s: exit %d, %s", code, errOut)
	}
	// A value after such a flag is an argument of its own: said so.
	_, errOut, code = runSluice(t, "serve", "--redis-require", "true")
	if want := `unexpected argument "true" (--redis-require takes no value: write --redis-require alone, or --redis-require=true)`; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("serve --redis-require true: exit %d, %q; want %q", code, errOut, want)
	}
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	set := defineSettingFlags(fs)
	var stderr bytes.Buffer
	args := []string{"--redis-leases", "--redis-require", "--watch=false", "--show-keys", "--show-keys=false", "--max-delay", "2s", "--redis-leases-share", "8"}
	if code, done := parseFlags(fs, args, false, io.Discard, &stderr); done {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg, code := serveConfig("", *set, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	r := cfg.Store.Redis
	if !r.Leases.Enabled || !r.Require || cfg.Watch == nil || *cfg.Watch || cfg.ShowKeys || time.Duration(cfg.MaxDelay) != 2*time.Second || r.Leases.Share != 8 {
		t.Errorf("leases %v, require %v, watch %v, show keys %v, max delay %v, share %d", r.Leases.Enabled, r.Require, cfg.Watch, cfg.ShowKeys, time.Duration(cfg.MaxDelay), r.Leases.Share)
	}
}

// TestServeHelpNamesEveryWay: serve --help lists every variable, and the
// setting without a flag says why.
func TestServeHelpNamesEveryWay(t *testing.T) {
	out, _, code := runSluice(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range server.Settings {
		if !strings.Contains(out, "  "+s.Env+" ") {
			t.Errorf("no %s in serve --help", s.Env)
		}
		if s.NoFlag != "" && !strings.Contains(out, "(no flag: "+s.NoFlag+")") {
			t.Errorf("serve --help does not say why %s has no flag", s.Name)
		}
	}
}
