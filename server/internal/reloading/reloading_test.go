package reloading

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloading steps a Value on a fake clock: a changed file is
// read again only after recheck, a change that does not parse keeps the
// previous value, and a later good change is taken.
func TestReloading(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v")
	write := func(s string, mod time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(path, mod, mod) // a distinct stamp even within one clock tick
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write("one", base)
	parse := func() (string, error) {
		b, err := os.ReadFile(path)
		if strings.HasPrefix(string(b), "bad") {
			return "", errors.New("bad content")
		}
		return string(b), err
	}
	r, err := New("value", []string{path}, parse, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := base
	r.now = func() time.Time { return now }
	r.checked = now
	for i, step := range []struct {
		advance time.Duration
		write   string
		want    string
	}{
		{0, "two", "one"},              // within recheck: not looked at
		{recheck, "", "two"},           // looked at: changed
		{recheck, "bad two", "two"},    // does not parse: the previous stays
		{recheck, "", "two"},           // unchanged since the bad one: not parsed again
		{recheck, "three", "three"},    // a good change is taken
		{recheck / 2, "four", "three"}, // too soon
		{recheck / 2, "", "four"},      // now
	} {
		now = now.Add(step.advance)
		if step.write != "" {
			write(step.write, base.Add(time.Duration(i+1)*time.Minute))
		}
		if got := r.Get(); got != step.want {
			t.Fatalf("step %d: got %q, want %q", i, got, step.want)
		}
	}
	if _, err := New("value", []string{path + ".missing"}, func() (string, error) { return "", os.ErrNotExist }, slog.Default()); err == nil || !strings.Contains(err.Error(), "value: ") {
		t.Errorf("a file that does not load at start: %v, want an error naming it", err)
	}
}
