package watch

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
		w := &Watcher{fs: fw, done: make(chan struct{}), paths: []string{path}, reload: func() { h.Reload() }, log: log}
		w.last = w.digest()
		w.wg.Add(1)
		go w.loop()
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
