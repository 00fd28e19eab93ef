package policy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/httpname"
	"github.com/sluicehq/sluice/shed"
	"go.yaml.in/yaml/v3"
)

// Shed is a policy's adaptive load shedding, its shed: section (package
// shed): sluice serve keeps an in-flight limit per instance that follows
// the upstream's latency, and refuses the excess with 503. A rule's
// priority: option, or PriorityHeader from a trusted proxy, gives requests
// their class.
type Shed struct {
	// Algorithm is "vegas" (the default), "gradient2" or "bbr".
	Algorithm string
	// InitialLimit, MinLimit and MaxLimit bound the limit; 0 means
	// shed.Config's default.
	InitialLimit, MinLimit, MaxLimit int
	// SheddableShare is the share of the limit sheddable requests may
	// fill; 0 means the default, 0.75.
	SheddableShare float64
	// CriticalWait bounds how long a critical request waits for a slot: 0
	// means the service's latency without load, negative never.
	CriticalWait time.Duration
	// RetryAfter is what refusals tell clients; 0 means 1s.
	RetryAfter time.Duration
	// PriorityHeader is the request header a trusted proxy names a
	// request's priority in. Default "Sluice-Priority".
	PriorityHeader string
	// CPUThreshold gates shedding by CPU usage (shed.Config.CPUThreshold);
	// 0: off.
	CPUThreshold float64
}

// Config returns the shed.Config of s, with an Algorithm of its own.
func (s *Shed) Config() shed.Config {
	var alg shed.Algorithm = &shed.Vegas{}
	switch s.Algorithm {
	case "gradient2":
		alg = &shed.Gradient2{}
	case "bbr":
		alg = &shed.BBR{}
	}
	return shed.Config{
		Algorithm: alg, InitialLimit: s.InitialLimit, MinLimit: s.MinLimit, MaxLimit: s.MaxLimit,
		SheddableShare: s.SheddableShare, CriticalWait: s.CriticalWait, RetryAfter: s.RetryAfter,
		CPUThreshold: s.CPUThreshold,
	}
}

// Priority is the shedding priority of r: the value of the shed section's
// priority header when r came straight from a trusted proxy, else the
// priority: of the first rule matching r that names one, else
// shed.Default. A priority header from any other peer is ignored.
func (p *Policy) Priority(r *http.Request) shed.Priority {
	if p.Shed != nil {
		if vs := r.Header[p.Shed.PriorityHeader]; len(vs) == 1 && p.ClientIP.PeerTrusted(r) {
			if prio, err := shed.ParsePriority(vs[0]); err == nil {
				return prio
			}
		}
	}
	if !p.prioritized {
		return shed.Default
	}
	n, err := Normalize(r)
	if err != nil {
		return shed.Default
	}
	mr := foldCase(n)
	for _, rule := range p.Rules {
		if rule.hasPriority && rule.match.pattern(mr) != "" {
			return rule.Priority
		}
	}
	return shed.Default
}

// shed reads the shed: section.
func (l *loader) shed(n *yaml.Node) *Shed {
	s := &Shed{PriorityHeader: "Sluice-Priority"}
	w := where{}
	f := l.Fields(n, w, "shed", "algorithm", "initial_limit", "min_limit", "max_limit", "sheddable_share",
		"critical_wait", "retry_after", "priority_header", "cpu_threshold")
	if v := f["algorithm"]; v != nil {
		s.Algorithm, _ = l.Str(v, w, "shed.algorithm")
		if s.Algorithm != "vegas" && s.Algorithm != "gradient2" && s.Algorithm != "bbr" {
			l.Fail(v, w, "shed.algorithm", "%q: want vegas, gradient2 or bbr", s.Algorithm)
		}
	}
	limit := func(field string, dst *int) {
		if v := f[field]; v != nil {
			n, _ := l.Int(v, w, "shed."+field, 1, 1_000_000)
			*dst = int(n)
		}
	}
	limit("initial_limit", &s.InitialLimit)
	limit("min_limit", &s.MinLimit)
	limit("max_limit", &s.MaxLimit)
	s.SheddableShare = l.share(f["sheddable_share"], "shed.sheddable_share")
	s.CPUThreshold = l.share(f["cpu_threshold"], "shed.cpu_threshold")
	l.shedDurations(f, s)
	if s.Algorithm == "bbr" && s.CPUThreshold == 0 {
		l.warn(f["algorithm"], w, "shed.algorithm", "bbr without cpu_threshold sheds bursts a lightly loaded service could take (its limit is the load's own concurrency); set cpu_threshold: 0.8, or use vegas")
	}
	if v := f["priority_header"]; v != nil {
		name, _ := l.Str(v, w, "shed.priority_header")
		s.PriorityHeader = http.CanonicalHeaderKey(name)
		if name == "" || !httpname.Valid(name) {
			l.Fail(v, w, "shed.priority_header", "%q is not a header name", name)
		}
	}
	at := func(field string) *yaml.Node {
		if v := f[field]; v != nil {
			return v
		}
		return n
	}
	lo, hi, init := or(s.MinLimit, 4), or(s.MaxLimit, 1000), or(s.InitialLimit, 20)
	switch {
	case hi < lo:
		l.Fail(at("max_limit"), w, "shed.max_limit", "%d is under min_limit (%d)", hi, lo)
	case init < lo || init > hi:
		l.Fail(at("initial_limit"), w, "shed.initial_limit", "%d is not between min_limit (%d) and max_limit (%d)", init, lo, hi)
	}
	return s
}

// share reads a number more than 0 and at most 1 (v is nil when absent:
// 0).
func (l *loader) share(v *yaml.Node, field string) float64 {
	if v == nil {
		return 0
	}
	x, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || !(x > 0 && x <= 1) {
		l.Fail(v, where{}, field, "want a number more than 0 and at most 1 (got %s)", v.Value)
	}
	return x
}

// shedDurations reads shed.critical_wait and shed.retry_after.
func (l *loader) shedDurations(f map[string]*yaml.Node, s *Shed) {
	w := where{}
	if v := f["critical_wait"]; v != nil {
		d, ok := l.Duration(v, w, "shed.critical_wait")
		switch {
		case ok && (d < 0 || d > time.Minute):
			l.Fail(v, w, "shed.critical_wait", "must be between 0s (never wait) and 1m (got %s)", v.Value)
		case d == 0:
			s.CriticalWait = -1
		default:
			s.CriticalWait = d
		}
	}
	if v := f["retry_after"]; v != nil {
		d, ok := l.Duration(v, w, "shed.retry_after")
		if ok && (d < time.Second || d > time.Hour) {
			l.Fail(v, w, "shed.retry_after", "must be between 1s and 1h (got %s)", v.Value)
		}
		s.RetryAfter = d
	}
}

// priority reads a rule's priority: option.
func (l *loader) priority(v *yaml.Node, w where, r *Rule) {
	s, _ := l.Str(v, w, "priority")
	prio, err := shed.ParsePriority(s)
	if err != nil {
		l.Fail(v, w, "priority", "%q: want critical, default or sheddable", s)
	}
	r.Priority, r.hasPriority = prio, true
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
