package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// FileName is the file of the state directory that keeps the overrides
// of a server on the memory store.
const FileName = "overrides.json"

// fileKeeper keeps the overrides in memory and in a JSON file, written
// whole (to a temporary file, then renamed) after every change.
type fileKeeper struct {
	path    string
	mu      sync.Mutex
	entries map[string]Entry
	version int64
}

// NewFile returns a Keeper of the overrides in dir/overrides.json, with
// those the file holds now; dir is created if it does not exist. A file
// that does not parse is an error: the server would otherwise start
// without overrides it was given.
func NewFile(dir string) (Keeper, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	k := &fileKeeper{path: filepath.Join(dir, FileName), entries: map[string]Entry{}}
	data, err := os.ReadFile(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return nil, err
	}
	var list []Entry
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w (move it away to start without overrides)", k.path, err)
	}
	for _, e := range list {
		k.entries[e.id()] = e
	}
	return k, nil
}

// NewMemory returns a Keeper of the overrides in memory only: they are
// lost when the process ends.
func NewMemory() Keeper { return &fileKeeper{entries: map[string]Entry{}} }

func (k *fileKeeper) Version(context.Context) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.version, nil
}

func (k *fileKeeper) Load(context.Context) ([]Entry, int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Entry, 0, len(k.entries))
	for _, e := range k.entries {
		out = append(out, e)
	}
	return out, k.version, nil
}

func (k *fileKeeper) Put(_ context.Context, e Entry) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	id := e.id()
	old, had := k.entries[id]
	if !had && len(k.entries) >= MaxOverrides {
		return ErrFull
	}
	k.entries[id] = e
	if err := k.write(); err != nil {
		if had {
			k.entries[id] = old
		} else {
			delete(k.entries, id)
		}
		return err
	}
	k.version++
	return nil
}

func (k *fileKeeper) Delete(_ context.Context, limit, key string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	id := entryID(limit, key)
	old, had := k.entries[id]
	if !had {
		return false, nil
	}
	delete(k.entries, id)
	if err := k.write(); err != nil {
		k.entries[id] = old
		return false, err
	}
	k.version++
	return true, nil
}

// write writes every entry to the file, atomically (nothing without a
// file). k.mu is held.
func (k *fileKeeper) write() error {
	if k.path == "" {
		return nil
	}
	list := make([]Entry, 0, len(k.entries))
	for _, e := range k.entries {
		list = append(list, e)
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(k.path), ".overrides-*.json")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), k.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", k.path, err)
	}
	return nil
}
