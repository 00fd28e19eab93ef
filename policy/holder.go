package policy

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
)

// Holder keeps the current policy of a file and replaces it on Reload,
// atomically: requests in flight finish under the policy they started with,
// later ones see the new one. A reload that fails keeps the old policy. A
// Holder is an httplimit.Source. It is safe for concurrent use.
type Holder struct {
	path     string
	opts     Options
	logger   *slog.Logger
	mu       sync.Mutex // serialises reloads
	current  atomic.Pointer[Policy]
	files    atomic.Pointer[[]string] // see Files
	failures atomic.Int64
}

var _ httplimit.Source = (*Holder)(nil)

// NewHolder loads the policy at path; it fails if that first load does.
// logger receives one line per load (nil: slog.Default()).
func NewHolder(path string, opts Options, logger *slog.Logger) (*Holder, error) {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Holder{path: path, opts: opts, logger: logger}
	if err := h.Reload(); err != nil {
		return nil, err
	}
	return h, nil
}

// Reload loads the file again. On success the new policy replaces the old
// one and a snapshot of its rules is logged; on failure the old policy
// stays, the error is logged and returned, and Failures counts it.
func (h *Holder) Reload() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, prices, err := load(h.path, h.opts)
	h.files.Store(&prices)
	if err != nil {
		h.failures.Add(1)
		if h.current.Load() != nil {
			h.logger.Error("policy: reload failed; the previous policy stays active", "file", h.path, "err", err)
		}
		return err
	}
	h.current.Store(p)
	h.logger.Info("policy: loaded", "file", h.path, "rules", len(p.Rules), "snapshot", p.Snapshot())
	return nil
}

// Files returns the files the last load read or tried to read: the
// policy's file, then each file of prices it names (cost.prices_file, as
// joined to the policy's directory). A change to any of them changes
// what the next Reload loads, so a watcher reloads when one changes. After
// a load that failed they are the files that load named, which the next
// one reads again unless the policy's file changes (a policy too broken to
// name its files of prices lists only its own file). A nil Holder has
// none.
func (h *Holder) Files() []string {
	if h == nil {
		return nil
	}
	files := []string{h.path}
	if prices := h.files.Load(); prices != nil {
		files = append(files, *prices...)
	}
	return files
}

// Policy returns the current policy.
func (h *Holder) Policy() *Policy { return h.current.Load() }

// Failures returns how many loads have failed.
func (h *Holder) Failures() int64 { return h.failures.Load() }

// Plan plans r under the current policy.
func (h *Holder) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	return h.current.Load().Plan(r, dst)
}

// Snapshot describes the active rules on one line: each rule's name and
// match, and each limit's name, key and algorithm (and, for a cost known
// after the response, its reservation and the header that settles it; for
// a limit with when:, when it applies).
func (p *Policy) Snapshot() string {
	var b strings.Builder
	for i, r := range p.Rules {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s [%s]:", r.Name, r.Match())
		for j, l := range r.Limits {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s by %s %s", l.Name, l.Key(), l.Limit)
			switch {
			case l.late != nil && l.late.Tokens != nil:
				fmt.Fprintf(&b, " counting %s tokens of LLM answers", l.late.Tokens.Measure)
			case l.late != nil:
				fmt.Fprintf(&b, " reserving %d, settled from %s", l.cost, l.late.Header)
			}
			b.WriteString(l.when.String())
		}
		switch {
		case r.Shadow:
			b.WriteString(" (shadow)")
		case r.Action.Wait:
			fmt.Fprintf(&b, " (delay up to %s)", r.Action.MaxDelay)
		}
	}
	return b.String()
}
