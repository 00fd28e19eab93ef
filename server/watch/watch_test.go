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
	fw := realWatcher(t)
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

// pricesRig is a policy whose prices are in a file, its holder and a
// Watcher over it that the test sends file events (in a synctest bubble).
type pricesRig struct {
	t       *testing.T
	dir     string
	fw      *fsnotify.Watcher
	h       *policy.Holder
	w       *Watcher
	reloads int // how many times the Watcher reloaded
}

// newPricesRig starts policy.yaml naming a.yaml, model m at output price 1.
func newPricesRig(t *testing.T, fw *fsnotify.Watcher) *pricesRig {
	r := &pricesRig{t: t, dir: t.TempDir(), fw: fw}
	os.Mkdir(r.file("other"), 0o755)
	r.write("policy.yaml", pricedPolicy("a.yaml"))
	r.write("a.yaml", priceOf(1))
	log := slog.New(slog.DiscardHandler)
	var err error
	if r.h, err = policy.NewHolder(r.file("policy.yaml"), policy.Options{}, log); err != nil {
		t.Fatal(err)
	}
	fw.Events, fw.Errors = make(chan fsnotify.Event), make(chan error)
	r.w = fakeEvents(fw, r.h.Files, func() { r.reloads++; r.h.Reload() }, log)
	t.Cleanup(func() { close(r.w.done); r.w.wg.Wait() })
	return r
}

func (r *pricesRig) file(name string) string { return filepath.Join(r.dir, name) }

func (r *pricesRig) write(name, content string) {
	r.t.Helper()
	if err := os.WriteFile(r.file(name), []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// edit writes a file, sends its event and lets the Watcher settle.
func (r *pricesRig) edit(name, content string) {
	r.t.Helper()
	r.write(name, content)
	r.fw.Events <- fsnotify.Event{Name: r.file(name), Op: fsnotify.Write}
	time.Sleep(2 * debounce)
	synctest.Wait()
}

// want checks the output price of m in force and the Watcher's reloads.
func (r *pricesRig) want(step string, price int64, reloads int) {
	r.t.Helper()
	p, _ := r.h.Policy().Rules[0].Limits[0].Late().Tokens.Prices.Of("m")
	if p.Output != price*1_000_000 || r.reloads != reloads {
		r.t.Errorf("%s: output price %d after %d reloads, want %d after %d", step, p.Output/1_000_000, r.reloads, price, reloads)
	}
}

// TestWatchFollowsPricesFiles: a change to a file of prices alone
// reloads; a reload that names another file of prices (missing at first)
// watches it and no longer the first; a file of prices that does not load
// keeps the policy.
func TestWatchFollowsPricesFiles(t *testing.T) {
	fw := realWatcher(t)
	synctest.Test(t, func(t *testing.T) {
		r := newPricesRig(t, fw)
		r.edit("a.yaml", priceOf(2))
		r.want("a.yaml edited", 2, 1)
		r.edit("policy.yaml", pricedPolicy("other/b.yaml")) // b.yaml missing: the policy stays
		r.want("naming a missing b.yaml", 2, 2)
		r.edit("other/b.yaml", priceOf(3))
		r.want("b.yaml written", 3, 3)
		r.edit("a.yaml", priceOf(4))
		r.want("a.yaml, no longer named, edited", 3, 3)
		r.edit("other/b.yaml", "prices: {m: {input: 1}}\n")
		r.want("b.yaml broken", 3, 4)
		if r.h.Failures() != 2 {
			t.Errorf("%d failed loads, want 2 (the missing b.yaml, the broken one)", r.h.Failures())
		}
	})
}

// TestWatchFollowsSIGHUP: after a reload made another way (SIGHUP) and
// Follow, the Watcher watches the files of prices that reload named.
func TestWatchFollowsSIGHUP(t *testing.T) {
	fw := realWatcher(t)
	synctest.Test(t, func(t *testing.T) {
		r := newPricesRig(t, fw)
		r.write("other/b.yaml", priceOf(2))
		r.write("policy.yaml", pricedPolicy("other/b.yaml"))
		r.h.Reload()
		r.w.Follow()
		synctest.Wait()
		r.want("SIGHUP to b.yaml", 2, 0)
		// Followed before any event: other/ (no event would come from it
		// otherwise) is watched.
		if got := r.w.watched; !slices.Equal(got, []string{r.file("policy.yaml"), r.file("other/b.yaml")}) || !r.w.dirs[r.file("other")] {
			t.Errorf("watching %q in %v", got, r.w.dirs)
		}
		r.edit("other/b.yaml", priceOf(3))
		r.want("b.yaml edited after SIGHUP", 3, 1)
		r.edit("a.yaml", priceOf(4))
		r.want("a.yaml, no longer named, edited", 3, 1)
	})
}

// realWatcher is a real fsnotify watcher, for rewatch, made outside the
// synctest bubble (its goroutine waits on the kernel); the events the
// loop reads come from the test. t closes it when it ends.
func realWatcher(t *testing.T) *fsnotify.Watcher {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	return fw
}
