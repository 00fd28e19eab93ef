package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// ErrInvalidConfig wraps every error of a configuration that does not load.
var ErrInvalidConfig = errors.New("rls: invalid config")

// maxFileSize bounds a configuration file, so a mistaken path (a log, a
// device) fails fast instead of filling memory.
const maxFileSize = 4 << 20

// Config is a compiled set of domains, each with its descriptor tree, as
// loaded by LoadConfig or ParseConfig. It is immutable and safe for
// concurrent use; give a new one to Service.Swap to change the limits.
type Config struct {
	domains map[string]*domain
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.domains))
	for name := range c.domains {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// String summarises c for logs: each domain with its file and the number of
// limits it defines.
func (c *Config) String() string {
	var b strings.Builder
	for i, name := range c.Domains() {
		if i > 0 {
			b.WriteString(", ")
		}
		d := c.domains[name]
		fmt.Fprintf(&b, "%s (%s, %d limits)", name, d.file, len(d.rules))
	}
	if b.Len() == 0 {
		return "no domains"
	}
	return b.String()
}

// domain is one configuration file's tree.
type domain struct {
	name  string
	file  string
	root  level
	rules []*rule // every rate_limit of the tree, in file order
}

// level is one list of descriptors: the entries a request's descriptor entry
// at this depth is matched against, most specific first.
type level struct {
	exact     map[pair]*node
	wildcards []*node // value ending in '*', in file order
	keyOnly   map[string]*node
}

type pair struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string // value "" means any value; a wildcard keeps its '*'
	rule       *rule  // nil when the descriptor has no rate_limit
	children   level
	nested     bool // the descriptor has a non-empty descriptors list
}

// lookup finds the entry for (key, value) in l: an exact key and value,
// else the first wildcard whose prefix the value starts with, else the key
// with any value.
func (l *level) lookup(key, value string) *node {
	if n := l.exact[pair{key, value}]; n != nil {
		return n
	}
	for _, n := range l.wildcards {
		if n.key == key && strings.HasPrefix(value, n.value[:len(n.value)-1]) {
			return n
		}
	}
	return l.keyOnly[key]
}

// Unit names accepted for rate_limit.unit, as envoyproxy/ratelimit accepts
// them (any letter case). Weeks, months and years are the fixed lengths
// that service uses: 7, 30 and 365 days.
var units = []struct {
	name string
	d    time.Duration
	pb   rlspb.RateLimitResponse_RateLimit_Unit
}{
	{"second", time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
	{"minute", time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
	{"hour", time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
	{"day", 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
	{"week", 7 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_WEEK},
	{"month", 30 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_MONTH},
	{"year", 365 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_YEAR},
}

const unitNames = "second, minute, hour, day, week, month or year"

// rule is one rate_limit block, compiled.
type rule struct {
	path      string // descriptor path, "remote_address/path=/api"
	name      string
	replaces  []string
	lines     []int // line of each replaces entry
	unlimited bool
	shadow    bool
	detailed  bool

	rpu    uint32 // requests_per_unit; 0 refuses every request
	unit   rlspb.RateLimitResponse_RateLimit_Unit
	mult   uint32        // unit_multiplier, at least 1
	period time.Duration // unit × unit_multiplier
	limit  sluice.Limit  // zero when unlimited or rpu is 0
}

// ParseConfig compiles one configuration file in envoyproxy/ratelimit's
// format (one domain per file); file names it in errors. Every error is
// reported (joined), each naming the file, line, domain, descriptor path and
// field. The error wraps ErrInvalidConfig.
func ParseConfig(file string, data []byte) (*Config, error) {
	d, err := parseDomain(file, data)
	if err != nil {
		return nil, err
	}
	return &Config{domains: map[string]*domain{d.name: d}}, nil
}

// LoadConfig reads configuration files and compiles them into one Config.
// Each path is a file, or a directory whose *.yaml and *.yml files are all
// read (not its subdirectories, nor files whose names start with a dot),
// as envoyproxy/ratelimit reads its runtime directory. Each file holds one
// domain; two files with the same domain are an error, as is a directory
// without configuration files. Errors of every file are reported together.
func LoadConfig(paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no configuration files given", ErrInvalidConfig)
	}
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		n := len(files)
		for _, e := range entries {
			name := e.Name()
			ext := filepath.Ext(name)
			if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			files = append(files, filepath.Join(p, name))
		}
		if len(files) == n {
			return nil, fmt.Errorf("%w: %s: the directory has no .yaml or .yml files", ErrInvalidConfig, p)
		}
	}
	cfg := &Config{domains: map[string]*domain{}}
	var errs []error
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := parseDomain(f, data)
		if err != nil {
			errs = append(errs, unwrapInvalid(err))
			continue
		}
		if other := cfg.domains[d.name]; other != nil {
			errs = append(errs, fmt.Errorf("%s: domain %q is already defined in %s", f, d.name, other.file))
			continue
		}
		cfg.domains[d.name] = d
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalidConfig, errors.Join(errs...))
	}
	return cfg, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// unwrapInvalid strips the ErrInvalidConfig prefix of a file's error so
// LoadConfig can join several under one.
func unwrapInvalid(err error) error {
	msg := strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+":\n")
	msg = strings.TrimPrefix(msg, ErrInvalidConfig.Error()+": ")
	return errors.New(msg)
}

func parseDomain(file string, data []byte) (*domain, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, larger than %d", ErrInvalidConfig, file, len(data), maxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%w: %s: the file is empty; it needs a domain", ErrInvalidConfig, file)
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		line := extra.Line
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, file, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, fmt.Errorf("%w: %s:%d: a second YAML document; write one domain per file", ErrInvalidConfig, file, line)
	}
	l := &loader{file: file}
	d := l.domain(&doc)
	if len(l.errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalidConfig, errors.Join(l.errs...))
	}
	return d, nil
}

// loader walks the YAML tree, collecting errors.
type loader struct {
	file  string
	errs  []error
	nodes int
}

// maxNodes bounds the descriptors of one file, so a hostile or generated
// file cannot build an unbounded tree (YAML aliases can multiply nodes).
const maxNodes = 100_000

// where is the place an error is about.
type where struct {
	domain, path string
}

func (w where) String() string {
	var b strings.Builder
	if w.domain != "" {
		fmt.Fprintf(&b, "domain %q: ", w.domain)
	}
	if w.path != "" {
		fmt.Fprintf(&b, "descriptor %s: ", w.path)
	}
	return b.String()
}

func (l *loader) fail(n *yaml.Node, w where, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	l.errs = append(l.errs, fmt.Errorf("%s:%d: %s%s", l.file, n.Line, w, msg))
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// fields reads a mapping, reporting unknown and repeated keys.
func (l *loader) fields(n *yaml.Node, w where, field string, allowed ...string) map[string]*yaml.Node {
	n = resolve(n)
	out := map[string]*yaml.Node{}
	if n == nil || n.Kind != yaml.MappingNode {
		l.fail(n, w, field, "want a mapping of %s", strings.Join(allowed, ", "))
		return out
	}
	prefix := ""
	if field != "" {
		prefix = field + "."
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(allowed, k.Value):
			l.fail(k, w, "", "unknown field %q (known: %s)", prefix+k.Value, strings.Join(allowed, ", "))
		case out[k.Value] != nil:
			l.fail(k, w, "", "field %s%s appears twice", prefix, k.Value)
		default:
			out[k.Value] = v
		}
	}
	return out
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (l *loader) str(n *yaml.Node, w where, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		l.fail(n, w, field, "want a string")
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// boolean reads true or false; like the YAML 1.1 reader envoyproxy/ratelimit
// uses, it also takes yes/no and on/off.
func (l *loader) boolean(n *yaml.Node, w where, field string) bool {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true", "yes", "on":
			return true
		case "false", "no", "off":
			return false
		}
	}
	l.fail(n, w, field, "want true or false (got %s)", show(n))
	return false
}

// uint reads a whole number from 0 to max.
func (l *loader) uint(n *yaml.Node, w where, field string, max int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode {
		l.fail(n, w, field, "want a whole number")
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	switch {
	case err != nil && strings.HasPrefix(n.Value, "-") && isDigits(n.Value[1:]):
		l.fail(n, w, field, "must not be negative (got %s)", n.Value)
	case err != nil && isDigits(n.Value):
		l.fail(n, w, field, "must be at most %d (got %s)", max, n.Value)
	case err != nil:
		l.fail(n, w, field, "%q is not a whole number", n.Value)
	case v < 0:
		l.fail(n, w, field, "must not be negative (got %d)", v)
	case v > max:
		l.fail(n, w, field, "must be at most %d (got %d)", max, v)
	default:
		return v, true
	}
	return 0, false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// show quotes a node's value for an error message, or names its kind.
func show(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "nothing"
}

func (l *loader) domain(doc *yaml.Node) *domain {
	d := &domain{file: l.file}
	if doc.Kind == 0 || len(doc.Content) == 0 || isNull(resolve(doc.Content[0])) {
		l.errs = append(l.errs, fmt.Errorf("%s: the file is empty; it needs a domain", l.file))
		return d
	}
	top := resolve(doc.Content[0])
	f := l.fields(top, where{}, "", "domain", "descriptors")
	if n := f["domain"]; n == nil {
		l.fail(top, where{}, "domain", "missing: every file names the domain its descriptors belong to")
	} else if s, ok := l.str(n, where{}, "domain"); ok {
		if s == "" {
			l.fail(n, where{}, "domain", "must not be empty")
		}
		d.name = s
	}
	w := where{domain: d.name}
	if n := f["descriptors"]; n != nil {
		d.root = l.level(n, w, "", d, 1)
	}
	// replaces must name a rate_limit of the same domain: a request names
	// one domain, so a name from elsewhere could never be replaced.
	names := map[string]bool{}
	for _, r := range d.rules {
		if r.name != "" {
			names[r.name] = true
		}
	}
	for _, r := range d.rules {
		for i, name := range r.replaces {
			if !names[name] {
				l.errs = append(l.errs, fmt.Errorf("%s:%d: %srate_limit.replaces.name: no rate_limit of this domain is named %q",
					l.file, r.lines[i], where{domain: d.name, path: r.path}, name))
			}
		}
	}
	return d
}

// level reads a descriptors list.
func (l *loader) level(n *yaml.Node, w where, parent string, d *domain, depth int) level {
	lv := level{exact: map[pair]*node{}, keyOnly: map[string]*node{}}
	if isNull(n) {
		return lv
	}
	if depth > MaxEntries {
		l.fail(n, where{domain: w.domain, path: parent}, "descriptors", "nested deeper than %d levels, which no request can reach (a descriptor has at most %d entries)", MaxEntries, MaxEntries)
		return lv
	}
	if n.Kind != yaml.SequenceNode {
		l.fail(n, w, "descriptors", "want a list of descriptors (got %s)", show(n))
		return lv
	}
	lines := map[pair]int{}
	for _, c := range n.Content {
		c = resolve(c)
		if l.nodes++; l.nodes > maxNodes {
			if l.nodes == maxNodes+1 { // report it once
				l.fail(c, w, "descriptors", "more than %d descriptors in one file", maxNodes)
			}
			return lv
		}
		nd, line := l.descriptor(c, w, parent, d, depth)
		if nd == nil {
			continue
		}
		p := pair{nd.key, nd.value}
		if first, dup := lines[p]; dup {
			l.fail(c, where{domain: w.domain, path: join(parent, nd.key, nd.value)}, "",
				"appears twice in the same list (first at line %d)", first)
			continue
		}
		lines[p] = line
		switch {
		case nd.value == "":
			lv.keyOnly[nd.key] = nd
		case strings.HasSuffix(nd.value, "*"):
			lv.wildcards = append(lv.wildcards, nd)
			lv.exact[p] = nd // a value that is literally "x*" matches itself first
		default:
			lv.exact[p] = nd
		}
	}
	return lv
}

// join extends a descriptor path: "parent/key" or "parent/key=value".
func join(parent, key, value string) string {
	s := key
	if value != "" {
		s += "=" + value
	}
	if parent == "" {
		return s
	}
	return parent + "/" + s
}

// peekScalar returns the plain string value of field in mapping n, so that
// errors about the other fields can name the descriptor.
func peekScalar(n *yaml.Node, field string) string {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := resolve(n.Content[i+1]); n.Content[i].Value == field && v.Kind == yaml.ScalarNode && !isNull(v) {
				return v.Value
			}
		}
	}
	return ""
}

func (l *loader) descriptor(n *yaml.Node, w where, parent string, d *domain, depth int) (*node, int) {
	key, value := peekScalar(n, "key"), peekScalar(n, "value")
	here := where{domain: w.domain, path: join(parent, key, value)}
	if key == "" {
		here.path = join(parent, "?", value)
	}
	f := l.fields(n, here, "", "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric")
	if len(f) == 0 && n.Kind != yaml.MappingNode {
		return nil, 0
	}
	nd := &node{}
	ok := true
	if k := f["key"]; k == nil {
		l.fail(n, here, "key", "missing: every descriptor has a key")
		ok = false
	} else if s, sok := l.str(k, here, "key"); sok {
		if s == "" {
			l.fail(k, here, "key", "must not be empty")
			ok = false
		}
		nd.key = s
	} else {
		ok = false
	}
	if v := f["value"]; v != nil {
		if s, sok := l.str(v, here, "value"); sok {
			nd.value = s
		}
	}
	path := here.path
	var shadow, detailed bool
	if v := f["shadow_mode"]; v != nil {
		shadow = l.boolean(v, here, "shadow_mode")
		if f["rate_limit"] == nil {
			l.fail(v, here, "shadow_mode", "applies only to a descriptor with a rate_limit")
		}
	}
	if v := f["detailed_metric"]; v != nil {
		detailed = l.boolean(v, here, "detailed_metric")
		if f["rate_limit"] == nil {
			l.fail(v, here, "detailed_metric", "applies only to a descriptor with a rate_limit")
		}
	}
	if v := f["rate_limit"]; v != nil {
		if r := l.rateLimit(v, here); r != nil {
			r.path, r.shadow, r.detailed = path, shadow, detailed
			if r.unlimited && shadow {
				l.fail(f["shadow_mode"], here, "shadow_mode", "an unlimited descriptor is never over its limit")
			}
			nd.rule = r
			d.rules = append(d.rules, r)
		}
	}
	if v := f["descriptors"]; v != nil {
		nd.children = l.level(v, w, path, d, depth+1)
		nd.nested = len(nd.children.exact)+len(nd.children.keyOnly) > 0
	}
	if !ok {
		return nil, 0
	}
	return nd, n.Line
}

func (l *loader) rateLimit(n *yaml.Node, w where) *rule {
	f := l.fields(n, w, "rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces", "unit_multiplier", "sluice")
	if len(f) == 0 && n.Kind != yaml.MappingNode {
		return nil
	}
	before := len(l.errs)
	r := &rule{mult: 1}
	if v := f["name"]; v != nil {
		if s, ok := l.str(v, w, "rate_limit.name"); ok {
			if s == "" {
				l.fail(v, w, "rate_limit.name", "must not be empty (leave the field out instead)")
			}
			r.name = s
		}
	}
	if v := f["replaces"]; v != nil {
		r.replaces, r.lines = l.replaces(v, w, r.name)
	}
	if v := f["unlimited"]; v != nil {
		r.unlimited = l.boolean(v, w, "rate_limit.unlimited")
	}
	if r.unlimited {
		for _, field := range []string{"unit", "requests_per_unit", "unit_multiplier", "sluice"} {
			if v := f[field]; v != nil {
				l.fail(v, w, "rate_limit."+field, "an unlimited rate_limit takes no %s", field)
			}
		}
		return r
	}
	unit := f["unit"]
	if unit == nil {
		l.fail(n, w, "rate_limit.unit", "missing (want %s, or unlimited: true)", unitNames)
	} else if s, ok := l.str(unit, w, "rate_limit.unit"); ok {
		found := false
		for _, u := range units {
			if strings.EqualFold(s, u.name) {
				r.unit, r.period, found = u.pb, u.d, true
			}
		}
		if !found {
			l.fail(unit, w, "rate_limit.unit", "unknown unit %q (want %s)", s, unitNames)
		}
	}
	if v := f["requests_per_unit"]; v == nil {
		l.fail(n, w, "rate_limit.requests_per_unit", "missing (0 refuses every request; write it out if that is meant)")
	} else if x, ok := l.uint(v, w, "rate_limit.requests_per_unit", math.MaxUint32); ok {
		r.rpu = uint32(x)
	}
	if v := f["unit_multiplier"]; v != nil {
		if x, ok := l.uint(v, w, "rate_limit.unit_multiplier", math.MaxUint32); ok {
			if x == 0 {
				l.fail(v, w, "rate_limit.unit_multiplier", "must be at least 1 (leave it out for 1)")
			}
			r.mult = uint32(x)
		}
	}
	if len(l.errs) > before {
		return nil
	}
	r.period *= time.Duration(r.mult)
	var ext extension
	if v := f["sluice"]; v != nil {
		ext = l.extension(v, w)
	}
	if len(l.errs) > before {
		return nil
	}
	lim, err := ext.limit(int64(r.rpu), r.period)
	if err != nil {
		l.fail(n, w, "rate_limit", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		return nil
	}
	r.limit = lim
	return r
}

func (l *loader) replaces(n *yaml.Node, w where, own string) ([]string, []int) {
	if n.Kind != yaml.SequenceNode {
		l.fail(n, w, "rate_limit.replaces", "want a list of {name: NAME} (got %s)", show(n))
		return nil, nil
	}
	var out []string
	var lines []int
	for _, c := range n.Content {
		c = resolve(c)
		f := l.fields(c, w, "rate_limit.replaces", "name")
		v := f["name"]
		if v == nil {
			if c.Kind == yaml.MappingNode {
				l.fail(c, w, "rate_limit.replaces", "each entry needs a name")
			}
			continue
		}
		s, ok := l.str(v, w, "rate_limit.replaces.name")
		switch {
		case !ok:
		case s == "":
			l.fail(v, w, "rate_limit.replaces.name", "must not be empty")
		case s == own:
			l.fail(v, w, "rate_limit.replaces.name", "%q is this rate_limit's own name", s)
		default:
			out = append(out, s)
			lines = append(lines, v.Line)
		}
	}
	return out, lines
}

// extension is the sluice: block of a rate_limit, choosing the algorithm.
type extension struct {
	alg     sluice.Algorithm
	burst   int64
	queue   int64
	nodelay int64
	warmup  time.Duration
}

// extFields lists, per algorithm, the fields of the sluice block it takes
// besides algorithm.
var extFields = map[sluice.Algorithm][]string{
	sluice.AlgorithmFixedWindow:   nil,
	sluice.AlgorithmSlidingWindow: nil,
	sluice.AlgorithmSlidingLog:    nil,
	sluice.AlgorithmTokenBucket:   {"burst"},
	sluice.AlgorithmGCRA:          {"burst"},
	sluice.AlgorithmLeakyBucket:   {"queue", "nodelay"},
	sluice.AlgorithmWarmUp:        {"warmup"},
}

const algorithmNames = "fixed_window, sliding_window, sliding_log, token_bucket, gcra, leaky_bucket or warm_up"

func (l *loader) extension(n *yaml.Node, w where) extension {
	ext := extension{alg: sluice.AlgorithmFixedWindow, burst: -1, queue: -1}
	f := l.fields(n, w, "rate_limit.sluice", "algorithm", "burst", "queue", "nodelay", "warmup")
	if v := f["algorithm"]; v != nil {
		s, _ := l.str(v, w, "rate_limit.sluice.algorithm")
		alg, err := sluice.ParseAlgorithm(s)
		switch {
		case v.Kind != yaml.ScalarNode:
			return ext
		case alg == sluice.AlgorithmConcurrency:
			l.fail(v, w, "rate_limit.sluice.algorithm", "concurrency limits requests in flight and needs each one released when it ends, which the rate limit service protocol cannot do; use sluice's gateway or middleware for it")
			return ext
		case err != nil:
			l.fail(v, w, "rate_limit.sluice.algorithm", "unknown algorithm %q (want %s)", s, algorithmNames)
			return ext
		}
		ext.alg = alg
	}
	for k, v := range f {
		if k != "algorithm" && !slices.Contains(extFields[ext.alg], k) {
			takes := "nothing else"
			if len(extFields[ext.alg]) > 0 {
				takes = strings.Join(extFields[ext.alg], ", ")
			}
			l.fail(v, w, "rate_limit.sluice."+k, "not used by %s (it takes %s)", ext.alg, takes)
		}
	}
	const maxBurst = 1 << 32
	if v := f["burst"]; v != nil {
		if x, ok := l.uint(v, w, "rate_limit.sluice.burst", maxBurst); ok {
			if x == 0 {
				l.fail(v, w, "rate_limit.sluice.burst", "must be at least 1")
			}
			ext.burst = x
		}
	}
	if v := f["queue"]; v != nil {
		if x, ok := l.uint(v, w, "rate_limit.sluice.queue", maxBurst); ok {
			ext.queue = x
		}
	} else if ext.alg == sluice.AlgorithmLeakyBucket {
		l.fail(n, w, "rate_limit.sluice.queue", "missing: leaky_bucket needs the number of requests that may wait")
	}
	if v := f["nodelay"]; v != nil {
		if x, ok := l.uint(v, w, "rate_limit.sluice.nodelay", maxBurst); ok {
			ext.nodelay = x
		}
	}
	if v := f["warmup"]; v != nil {
		if s, ok := l.str(v, w, "rate_limit.sluice.warmup"); ok {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				l.fail(v, w, "rate_limit.sluice.warmup", "%q is not a positive duration (write 30s, 1m)", s)
			}
			ext.warmup = d
		}
	} else if ext.alg == sluice.AlgorithmWarmUp {
		l.fail(n, w, "rate_limit.sluice.warmup", "missing: warm_up needs the time the rate takes to climb")
	}
	return ext
}

// limit builds the sluice.Limit of n requests per period under ext. n == 0
// refuses every request and needs no limit.
func (ext extension) limit(n int64, period time.Duration) (sluice.Limit, error) {
	if ext.alg == 0 {
		ext.alg = sluice.AlgorithmFixedWindow
	}
	var lim sluice.Limit
	switch ext.alg {
	case sluice.AlgorithmFixedWindow:
		lim = sluice.FixedWindow(n, period)
	case sluice.AlgorithmSlidingWindow:
		lim = sluice.SlidingWindow(n, period)
	case sluice.AlgorithmSlidingLog:
		lim = sluice.SlidingLog(n, period)
	case sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA:
		burst := ext.burst
		if burst < 0 {
			burst = n // default: one unit's worth
		}
		lim = sluice.TokenBucket(sluice.Per(n, period), burst)
		if ext.alg == sluice.AlgorithmGCRA {
			lim = sluice.GCRA(sluice.Per(n, period), burst)
		}
	case sluice.AlgorithmLeakyBucket:
		lim = sluice.LeakyBucket(sluice.Per(n, period), ext.queue).WithNoDelay(ext.nodelay)
	case sluice.AlgorithmWarmUp:
		lim = sluice.WarmUp(sluice.Per(n, period), ext.warmup)
	}
	if n == 0 {
		return sluice.Limit{}, nil
	}
	return lim, lim.Validate()
}
