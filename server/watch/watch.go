// Package watch reloads sluice serve's configs when their files change:
// it watches the directories that hold them (so that an editor's rename
// and a Kubernetes ConfigMap's symlink swap are seen), waits for a burst
// of events to settle, and reloads only when a file's content changed.
package watch

import (
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
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
type Watcher struct {
	fs    *fsnotify.Watcher
	done  chan struct{}
	wg    sync.WaitGroup
	paths []string // the config files and directories
	dirs  map[string]bool
	last  [sha256.Size]byte

	reload func() // loads the configs again; logs and counts its own errors
	log    *slog.Logger
}

// debounce is how long a burst of file events settles before a reload.
const debounce = 200 * time.Millisecond

// Start watches paths (config files, or directories of them) and calls
// reload when their content changes. It returns nil, nil without paths.
func Start(paths []string, reload func(), log *slog.Logger) (*Watcher, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{fs: fw, done: make(chan struct{}), paths: paths, dirs: map[string]bool{}, reload: reload, log: log}
	if err := w.rewatch(); err != nil {
		fw.Close()
		return nil, err
	}
	w.last = w.digest()
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// loop reloads the server a debounce after the last event. An error of
// the Watcher (above all fsnotify.ErrEventOverflow: the kernel dropped
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
		case <-fire:
			fire = nil
			if err := w.rewatch(); err != nil {
				w.log.Warn("watching config files", "err", err)
			}
			d := w.digest()
			if d == w.last {
				continue
			}
			w.last = d
			w.log.Info("config files changed: reloading", "paths", w.paths)
			w.reload()
		}
	}
}

// watchDirs lists the directories to watch for paths: the directory of
// each, each directory and its subdirectories, and the directory holding
// each symbolic link on the way to one.
func watchDirs(paths []string) (map[string]bool, error) {
	dirs := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		dirs[filepath.Dir(abs)] = true
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

// rewatch watches the directories watchDirs lists now, again: one reached
// through a link that was re-pointed is another directory than before.
func (w *Watcher) rewatch() error {
	dirs, err := watchDirs(w.paths)
	if err != nil {
		return err
	}
	for d := range w.dirs {
		w.fs.Remove(d) // gone, or added again below
	}
	w.dirs = map[string]bool{}
	for d := range dirs {
		if err := w.fs.Add(d); err != nil {
			return err
		}
		w.dirs[d] = true
	}
	return nil
}

// digest hashes the content of every config file (following symlinks),
// so that events that change nothing (a touch, an unrelated file in the
// same directory) do not reload.
func (w *Watcher) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, p := range w.paths {
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
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

func (w *Watcher) Close() {
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	w.fs.Close()
	w.wg.Wait()
}
