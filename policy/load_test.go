package policy_test

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// TestInvalidFixtures: one file per way a policy can be wrong; the first
// lines say, after "# want: ", exactly the errors it must produce.
func TestInvalidFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 20 {
		t.Fatalf("only %d fixtures found", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want := wants(t, file)
			_, err := policy.Load(file, policy.Options{})
			if err == nil {
				t.Fatal("loaded without error")
			}
			if !errors.Is(err, policy.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			got := strings.TrimPrefix(err.Error(), "policy: invalid:\n")
			got = strings.TrimPrefix(got, "policy: invalid: ")
			if got != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

func wants(t *testing.T, file string) []string {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no # want: line", file)
	}
	return out
}

func TestExampleLoads(t *testing.T) {
	p, err := policy.Load("testdata/example.yaml", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `orders [POST /api/orders/{id}]: orders-global by global token_bucket(5000/s, burst 5000), orders-per-user by header:X-User-ID sliding_window(10 per 1s), orders-per-ip by ip gcra(50/s, burst 50); search [GET /api/search]: search-per-ip by ip+query:q fixed_window(100 per 1m) (delay up to 200ms); reports [/reports/]: reports-in-flight by cookie:session concurrency(2, lease 5m); new-api-trial [beta.example.com/]: beta-per-ip by ip leaky_bucket(20/s, queue 10, nodelay 5) (shadow)`
	if got := p.Snapshot(); got != want {
		t.Fatalf("snapshot:\n got %s\nwant %s", got, want)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	files = append(files, "testdata/example.yaml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse("fuzz.yaml", data, policy.Options{})
		if err == nil && (p == nil || len(p.Rules) == 0) {
			t.Fatal("a policy without rules loaded")
		}
	})
}

// TestDocsShowTheExample keeps docs/config.md's example the file the tests
// load.
func TestDocsShowTheExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	example, _ := os.ReadFile("testdata/example.yaml")
	if !strings.Contains(string(doc), string(example)) {
		t.Fatal("docs/config.md does not contain policy/testdata/example.yaml verbatim")
	}
}
