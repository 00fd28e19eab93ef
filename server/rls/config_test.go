package rls_test

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/rls"
)

// TestInvalidFixtures: one file per way a configuration can be wrong; its
// "# want: " lines say exactly the errors it must produce.
func TestInvalidFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 25 {
		t.Fatalf("only %d fixtures found", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, err := rls.LoadConfig(file)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			got := strings.TrimPrefix(err.Error(), "rls: invalid config:\n")
			if os.Getenv("RLS_SHOW") != "" {
				t.Logf("\n%s", got)
			}
			want := wants(t, file)
			if got != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

func wants(t *testing.T, file string) []string { return prefixed(t, file, "# want: ") }

// prefixed returns the rest of each line of file that starts with prefix.
func prefixed(t *testing.T, file, prefix string) []string {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		t.Errorf("%s has no %s line", file, prefix)
	}
	return out
}

func TestLoadDirectoryAndFiles(t *testing.T) {
	cfg, err := rls.LoadConfig("testdata/dir")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "edge,mongo_cps" {
		t.Fatalf("domains %s", got)
	}
	cfg, err = rls.LoadConfig("testdata/dir/edge.yaml", "testdata/dir/mongo.yml")
	if err != nil || len(cfg.Domains()) != 2 {
		t.Fatalf("%v %v", cfg.Domains(), err)
	}
	// the same domain twice, across a directory or across files
	_, err = rls.LoadConfig("testdata/dupdir")
	if want := "rls: invalid config:\ntestdata/dupdir/b.yaml: domain \"edge\" is already defined in testdata/dupdir/a.yaml (set merge_domains to merge them)"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	_, err = rls.LoadConfig("testdata/dir", "testdata/dupdir/a.yaml")
	if err == nil || !strings.Contains(err.Error(), `testdata/dupdir/a.yaml: domain "edge" is already defined in testdata/dir/edge.yaml`) {
		t.Fatalf("got %v", err)
	}
	// errors of several files are reported together
	_, err = rls.LoadConfig("testdata/invalid/bad-unit.yaml", "testdata/invalid/negative.yaml")
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Fatalf("got %v", err)
	}
	for _, p := range []string{"testdata/missing.yaml", "testdata/valid"} {
		if _, err := rls.LoadConfig(p); !errors.Is(err, rls.ErrInvalidConfig) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := rls.LoadConfig(); err == nil {
		t.Error("no paths loaded")
	}
}

// FuzzParseConfig: no input panics, and whatever loads has one named domain
// whose every rate_limit is usable.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.y*ml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := rls.ParseConfig("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		if d := cfg.Domains(); len(d) != 1 || d[0] == "" {
			t.Fatalf("domains %q", d)
		}
	})
}

// TestConfigErrors: a configuration's errors are values naming file, line,
// domain, descriptor and field, across files, and the whole still wraps
// ErrInvalidConfig.
func TestConfigErrors(t *testing.T) {
	_, err := rls.LoadConfig("testdata/invalid/bad-unit.yaml", "testdata/invalid/nodelay-above-queue.yaml", "testdata/invalid/empty.yaml")
	if !errors.Is(err, rls.ErrInvalidConfig) {
		t.Fatalf("%v does not wrap ErrInvalidConfig", err)
	}
	want := []rls.ConfigError{
		{File: "testdata/invalid/bad-unit.yaml", Line: 9, Domain: "edge", Descriptor: "remote_address/path=/api", Field: "rate_limit.unit", Msg: `unknown unit "sec" (want second, minute, hour, day, week, month or year)`},
		{File: "testdata/invalid/nodelay-above-queue.yaml", Line: 11, Domain: "edge", Descriptor: "user", Field: "rate_limit.sluice.nodelay", Msg: "must be between 0 and the queue length 2 (got 3)"},
		{File: "testdata/invalid/empty.yaml", Msg: "the file is empty; it needs a domain"},
	}
	got := rls.ConfigErrors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if *got[i] != want[i] {
			t.Errorf("error %d:\n got %+v\nwant %+v", i, *got[i], want[i])
		}
	}
	if rls.ConfigErrors(errors.New("other")) != nil {
		t.Error("errors found in a plain error")
	}
}

// TestEveryAlgorithm: a rate_limit's sluice block reads every parameter of
// every algorithm the protocol can carry (all but concurrency).
func TestEveryAlgorithm(t *testing.T) {
	sample := map[string]string{"burst": "5", "queue": "5", "nodelay": "1", "warmup": "10s"}
	for _, alg := range sluice.Algorithms() {
		if alg == sluice.AlgorithmConcurrency {
			continue
		}
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      sluice:\n        algorithm: " + alg.String() + "\n"
		for _, f := range alg.Fields() {
			if v, ok := sample[f]; ok {
				src += "        " + f + ": " + v + "\n"
			}
		}
		if _, err := rls.ParseConfig("alg.yaml", []byte(src)); err != nil {
			t.Errorf("%s: %v\n%s", alg, err, src)
		}
	}
}

// TestWarnFixtures: files envoyproxy/ratelimit loads that sluice's strict
// reading refuses load with warnings; their "# warn: " lines say exactly
// which.
func TestWarnFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/warn/*.yaml")
	if len(files) < 6 {
		t.Fatalf("only %d fixtures found", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg, err := rls.LoadConfig(file)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range cfg.Warnings() {
				got = append(got, w.Error())
			}
			want := prefixed(t, file, "# warn: ")
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestLoadLayout: a directory is read as envoyproxy/ratelimit reads its
// runtime directory: nested files, any extension (.json, none), not dot
// files; an empty directory loads no domain with a warning; the same
// domain in two files merges with MergeDomains unless a descriptor is in
// both.
func TestLoadLayout(t *testing.T) {
	cfg, err := rls.LoadConfig("testdata/nested")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "deep,json_domain,no_extension" {
		t.Fatalf("domains %s", got)
	}
	empty := t.TempDir()
	cfg, err = rls.LoadConfig(empty)
	if err != nil || len(cfg.Domains()) != 0 || len(cfg.Warnings()) != 1 {
		t.Fatalf("empty directory: %v %v %v", cfg.Domains(), cfg.Warnings(), err)
	}
	cfg, err = rls.LoadConfigWith(rls.LoadOptions{MergeDomains: true}, "testdata/mergedir")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.String(); got != "edge (testdata/mergedir/a.yaml, testdata/mergedir/b.yaml, 2 limits)" {
		t.Fatalf("merged: %s", got)
	}
	_, err = rls.LoadConfigWith(rls.LoadOptions{MergeDomains: true}, "testdata/dupdir")
	if want := `testdata/dupdir/b.yaml: domain "edge": descriptor remote_address: also defined in testdata/dupdir/a.yaml`; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "also defined in") {
		t.Fatalf("got %v, want %s...", err, want)
	}
}
