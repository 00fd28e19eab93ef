// Package watch reloads sluice serve's configs when their files change:
// it watches the directories that hold them (so that an editor's rename
// and a Kubernetes ConfigMap's symlink swap are seen), waits for a burst
// of events to settle, and reloads only when a file's content changed.
// The files are those the loaded configs name (a policy's and its files
// of prices), asked again after each reload.
package watch

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/server/rls"
)

// Watcher reloads the server when a config file changes. It watches the
// directories that hold the files, not the files: editors replace a file
// by writing another and renaming it over the first, and Kubernetes swaps
// a ConfigMap by re-pointing a ..data symlink, and neither event reaches a
// watch on the old file. Any event in those directories schedules a check
// (debounced); the server reloads only if the content of a config changed.
//
// A symbolic link on the way to a config (envoyproxy/ratelimit's runtime
// root, /srv/runtime_data/current, re-pointed to swap every file at once)
// is watched in the directory that holds it, and every check re-reads the
// paths through the links and watches the directories they lead to now.
//
// The files are those the loaded configs name (a policy's files of prices
// among them), and the Watcher follows them: after each reload (and each
// Follow) it asks for the paths again, watches the new ones from their
// content as loaded and forgets the dropped ones.
//
// The Watcher's own goroutine does all of this (checks, reloads, follows),
// one at a time; Follow and Close may be called from any goroutine.
type Watcher struct {
	fs      *fsnotify.Watcher
	done    chan struct{}
	follows chan struct{} // Follow's requests: one pending at most
	wg      sync.WaitGroup
	paths   func() []string // the config files and directories the configs name now
	watched []string        // what paths returned last, each once
	dirs    map[string]bool
	last    map[string][sha256.Size]byte // each watched path's content when it was last loaded

	reload func() // loads the configs again; logs and counts its own errors
	log    *slog.Logger
}

// debounce is how long a burst of file events settles before a reload.
const debounce = 200 * time.Millisecond

// Start watches paths (config files, or directories of them) and calls
// reload when their content changes; it calls paths again after each
// reload, to watch the files the configs name now. It returns nil, nil
// when paths returns none.
func Start(paths func() []string, reload func(), log *slog.Logger) (*Watcher, error) {
	ps := unique(paths())
	if len(ps) == 0 {
		return nil, nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{fs: fw, done: make(chan struct{}), follows: make(chan struct{}, 1), paths: paths,
		watched: ps, dirs: map[string]bool{}, last: map[string][sha256.Size]byte{}, reload: reload, log: log}
	if err := w.rewatch(); err != nil {
		fw.Close()
		return nil, err
	}
	for _, p := range ps {
		w.last[p] = digest(p)
	}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Follow has the Watcher ask for the paths again, after the configs were
// loaded another way than by the Watcher (SIGHUP): it watches the files
// that load named from their content now. It does not wait. A nil
// Watcher (no watching) does nothing.
func (w *Watcher) Follow() {
	if w == nil {
		return
	}
	select {
	case w.follows <- struct{}{}:
	default: // one is pending: it will ask after this load
	}
}

// loop checks the files a debounce after the last event. An error of the
// Watcher (above all fsnotify.ErrEventOverflow: the kernel dropped
// events, perhaps the last of a burst) schedules a check too, since the
// files may have changed unseen.
func (w *Watcher) loop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var fire <-chan time.Time
	schedule := func() {
		timer.Reset(debounce)
		fire = timer.C
	}
	for {
		select {
		case <-w.done:
			timer.Stop()
			return
		case _, ok := <-w.fs.Events:
			if !ok {
				return
			}
			schedule()
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching config files; checking them now", "err", err)
			schedule()
		case <-w.follows:
			w.follow()
		case <-fire:
			fire = nil
			w.check()
		}
	}
}

// check reloads the server if a watched file's content changed since it
// was last loaded, then follows the files the configs name now.
func (w *Watcher) check() {
	if err := w.rewatch(); err != nil {
		w.log.Warn("watching config files", "err", err)
	}
	var changed []string
	for _, p := range w.watched {
		if d := digest(p); d != w.last[p] {
			w.last[p] = d
			changed = append(changed, p)
		}
	}
	if len(changed) == 0 {
		return
	}
	w.log.Info("config files changed: reloading", "paths", changed)
	w.reload()
	w.follow()
}

// follow watches the paths the configs name now. A path watched already
// keeps its content as last loaded (a change the load did not see still
// reloads); a new one is taken as the load that named it read it, a
// moment ago; a dropped one is no longer watched.
func (w *Watcher) follow() {
	ps := unique(w.paths())
	if slices.Equal(ps, w.watched) {
		return
	}
	w.watched = ps
	if err := w.rewatch(); err != nil {
		w.log.Warn("watching config files", "err", err)
	}
	last := make(map[string][sha256.Size]byte, len(ps))
	for _, p := range ps {
		d, ok := w.last[p]
		if !ok {
			d = digest(p)
		}
		last[p] = d
	}
	w.last = last
	w.log.Info("watching config files", "paths", ps)
}

// unique returns paths without repeats, in order.
func unique(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// watchDirs lists the directories to watch for paths: the directory of
// each (or, while it does not exist, the nearest one above it that does,
// where it will appear), each directory and its subdirectories, and the
// directory holding each symbolic link on the way to one.
func watchDirs(paths []string) (map[string]bool, error) {
	dirs := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		dirs[existingDir(filepath.Dir(abs))] = true
		for a := abs; a != filepath.Dir(a); a = filepath.Dir(a) {
			if fi, err := os.Lstat(a); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				dirs[filepath.Dir(a)] = true
			}
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			filepath.WalkDir(abs, func(d string, e os.DirEntry, err error) error {
				if err == nil && (d == abs || e.IsDir() && !strings.HasPrefix(e.Name(), ".")) {
					dirs[d] = true
				} else if err == nil && e.IsDir() {
					return filepath.SkipDir
				}
				return nil
			})
		}
	}
	return dirs, nil
}

// existingDir returns dir, or while it does not exist the nearest
// directory above it that does.
func existingDir(dir string) string {
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() || dir == filepath.Dir(dir) {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// rewatch watches the directories watchDirs lists now, again: one reached
// through a link that was re-pointed is another directory than before. A
// directory it cannot watch is left out, the others are watched, and the
// errors are returned.
func (w *Watcher) rewatch() error {
	dirs, err := watchDirs(w.watched)
	if err != nil {
		return err
	}
	for d := range w.dirs {
		w.fs.Remove(d) // gone, or added again below
	}
	w.dirs = map[string]bool{}
	var errs []error
	for d := range dirs {
		if err := w.fs.Add(d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
			continue
		}
		w.dirs[d] = true
	}
	return errors.Join(errs...)
}

// digest hashes the content of a config file (following symlinks), or of
// each config file of a directory, so that events that change nothing (a
// touch, an unrelated file in the same directory) do not reload.
func digest(p string) [sha256.Size]byte {
	h := sha256.New()
	var files []string
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		files, _, _ = rls.ConfigFiles(p) // sorted; an error shows as fewer files
	} else {
		files = []string{p}
	}
	for _, f := range files {
		h.Write([]byte(f))
		h.Write([]byte{0})
		if data, err := os.ReadFile(f); err == nil {
			h.Write(data)
		} else {
			h.Write([]byte(err.Error()))
		}
		h.Write([]byte{0})
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// Close stops watching. It waits for a check or reload under way. A nil
// Watcher does nothing.
func (w *Watcher) Close() {
	if w == nil {
		return
	}
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	w.fs.Close()
	w.wg.Wait()
}
