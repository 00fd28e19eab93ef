package server

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watcher reloads the server when a config file changes. It watches the
// directories that hold the files, not the files: editors replace a file
// by writing another and renaming it over the first, and Kubernetes swaps
// a ConfigMap by re-pointing a ..data symlink, and neither event reaches a
// watch on the old file. Any event in those directories schedules a check
// (debounced); the server reloads only if the content of a config changed.
type watcher struct {
	fs    *fsnotify.Watcher
	done  chan struct{}
	wg    sync.WaitGroup
	paths []string // the config files and directories
	last  [sha256.Size]byte
}

// debounce is how long a burst of file events settles before a reload.
const debounce = 200 * time.Millisecond

func (s *Server) watch() (*watcher, error) {
	var paths []string
	if s.cfg.Policy != "" {
		paths = append(paths, s.cfg.Policy)
	}
	paths = append(paths, s.cfg.RLS...)
	if len(paths) == 0 {
		return nil, nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{fs: fw, done: make(chan struct{}), paths: paths}
	dirs := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			fw.Close()
			return nil, err
		}
		dirs[filepath.Dir(abs)] = true
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			dirs[abs] = true
		}
	}
	for d := range dirs {
		if err := fw.Add(d); err != nil {
			fw.Close()
			return nil, err
		}
	}
	w.last = w.digest()
	w.wg.Add(1)
	go w.loop(s)
	return w, nil
}

// loop reloads the server a debounce after the last event. An error of
// the watcher (above all fsnotify.ErrEventOverflow: the kernel dropped
// events, perhaps the last of a burst) schedules a check too, since the
// files may have changed unseen.
func (w *watcher) loop(s *Server) {
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
			s.log.Warn("watching config files; checking them now", "err", err)
			schedule()
		case <-fire:
			fire = nil
			d := w.digest()
			if d == w.last {
				continue
			}
			w.last = d
			s.log.Info("config files changed: reloading", "paths", w.paths)
			s.Reload() // logs and counts its own errors
		}
	}
}

// digest hashes the content of every config file (following symlinks),
// so that events that change nothing (a touch, an unrelated file in the
// same directory) do not reload.
func (w *watcher) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, p := range w.paths {
		var files []string
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			entries, _ := os.ReadDir(p) // sorted; an error shows as fewer files
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), ".") && isYAML(e.Name()) {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
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

func isYAML(path string) bool {
	return slices.Contains([]string{".yaml", ".yml"}, filepath.Ext(path))
}

func (w *watcher) close() {
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	w.fs.Close()
	w.wg.Wait()
}
