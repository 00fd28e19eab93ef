package watch

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/policy"
)

func capPolicy(n int) string {
	return "rules:\n  - name: all\n    limits:\n      - {name: cap, key: global, algorithm: fixed_window, limit: " +
		string(rune('0'+n)) + ", window: 1h}\n"
}

// TestWatchOverflow: when the kernel drops file events (the watcher
// reports fsnotify.ErrEventOverflow instead of the last write of a burst),
// the files are checked anyway and the change is loaded.
func TestWatchOverflow(t *testing.T) {
	// A real watcher, for rewatch, made outside the bubble (its goroutine
	// waits on the kernel); the events loop reads come from the test.
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(capPolicy(1)), 0o644); err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		h, err := policy.NewHolder(path, policy.Options{}, log)
		if err != nil {
			t.Fatal(err)
		}
		events, errs := make(chan fsnotify.Event), make(chan error)
		fw.Events, fw.Errors = events, errs
		w := fakeEvents(fw, h.Files, func() { h.Reload() }, log)
		defer func() { close(w.done); w.wg.Wait() }()

		events <- fsnotify.Event{Name: path, Op: fsnotify.Write} // an event of the burst (a touch): seen, checked, no change
		time.Sleep(2 * debounce)
		synctest.Wait()
		if err := os.WriteFile(path, []byte(capPolicy(2)), 0o644); err != nil {
			t.Fatal(err)
		}
		errs <- fsnotify.ErrEventOverflow // its last write: lost
		time.Sleep(2 * debounce)
		synctest.Wait()
		if got := h.Policy().Rules[0].Limits[0].Limit.String(); got != "fixed_window(2 per 1h)" {
			t.Errorf("after a write whose event was lost the policy is %q, want the new one", got)
		}
	})
}

// fakeEvents starts a Watcher over fw, whose Events and Errors the test
// has replaced by its own channels: the test sends the file events.
func fakeEvents(fw *fsnotify.Watcher, paths func() []string, reload func(), log *slog.Logger) *Watcher {
	ps := unique(paths())
	w := &Watcher{fs: fw, done: make(chan struct{}), follows: make(chan struct{}, 1), paths: paths,
		watched: ps, last: map[string][sha256.Size]byte{}, reload: reload, log: log}
	for _, p := range ps {
		w.last[p] = digest(p)
	}
	w.wg.Add(1)
	go w.loop()
	return w
}

// pricedPolicy is a money budget whose prices are in the file prices.
func pricedPolicy(prices string) string {
	return "rules:\n  - name: llm\n    limits:\n      - {name: usd, key: global, algorithm: fixed_window, limit: 1000000000, window: 1h, cost: {prices_file: " +
		prices + "}}\n"
}

// priceOf is a file of prices: model m at output price out per million tokens.
func priceOf(out int) string {
	return fmt.Sprintf("prices: {m: {input: 1, output: %d}}\n", out)
}

// TestWatchFollowsPricesFiles: a change to a file of prices alone
// reloads; a reload that names another file of prices watches it and no
// longer the first; a file of prices that does not load keeps the policy;
// a reload made another way (SIGHUP) is followed too.
func TestWatchFollowsPricesFiles(t *testing.T) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		file := func(name string) string { return filepath.Join(dir, name) }
		write := func(name, content string) {
			if err := os.WriteFile(file(name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		os.Mkdir(file("other"), 0o755)
		write("policy.yaml", pricedPolicy("a.yaml"))
		write("a.yaml", priceOf(1))
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		h, err := policy.NewHolder(file("policy.yaml"), policy.Options{}, log)
		if err != nil {
			t.Fatal(err)
		}
		fw.Events, fw.Errors = make(chan fsnotify.Event), make(chan error)
		reloads := 0
		w := fakeEvents(fw, h.Files, func() { reloads++; h.Reload() }, log)
		defer func() { close(w.done); w.wg.Wait() }()
		edit := func(name, content string) {
			t.Helper()
			write(name, content)
			fw.Events <- fsnotify.Event{Name: file(name), Op: fsnotify.Write}
			time.Sleep(2 * debounce)
			synctest.Wait()
		}
		want := func(step string, price int64, n int) {
			t.Helper()
			p, _ := h.Policy().Rules[0].Limits[0].Late().Tokens.Prices.Of("m")
			if p.Output != price*1_000_000 || reloads != n {
				t.Errorf("%s: output price %d after %d reloads, want %d after %d", step, p.Output/1_000_000, reloads, price, n)
			}
		}
		edit("a.yaml", priceOf(2))
		want("a.yaml edited", 2, 1)
		edit("policy.yaml", pricedPolicy("other/b.yaml")) // b.yaml missing: the policy stays
		want("naming a missing b.yaml", 2, 2)
		edit("other/b.yaml", priceOf(3))
		want("b.yaml written", 3, 3)
		edit("a.yaml", priceOf(4))
		want("a.yaml, no longer named, edited", 3, 3)
		edit("other/b.yaml", "prices: {m: {input: 1}}\n")
		want("b.yaml broken", 3, 4)
		if h.Failures() != 2 {
			t.Errorf("%d failed loads, want 2 (the missing b.yaml, the broken one)", h.Failures())
		}

		write("policy.yaml", pricedPolicy("a.yaml")) // a SIGHUP's reload
		h.Reload()
		w.Follow()
		synctest.Wait()
		want("SIGHUP back to a.yaml", 4, 4)
		edit("a.yaml", priceOf(5))
		want("a.yaml edited after SIGHUP", 5, 5)
		if got := w.watched; !slices.Equal(got, []string{file("policy.yaml"), file("a.yaml")}) {
			t.Errorf("watching %q", got)
		}
	})
}
