package rls

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/yamlload"
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
	domains  map[string]*domain
	warnings []*ConfigError
}

// Warnings returns what the configuration does that envoyproxy/ratelimit
// accepts but sluice's strict reading would refuse (a repeated field, a
// field at a level that does not read it, a limit without
// requests_per_unit...), in the order found. The configuration loads with
// the meaning that service gives it; sluice check --strict refuses it.
func (c *Config) Warnings() []*ConfigError {
	if c == nil {
		return nil
	}
	return c.warnings
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

// Limit names one configured rate_limit: its domain and descriptor path
// (Outcome.Rule), and whether it is in shadow_mode.
type Limit struct {
	Domain, Path string
	Shadow       bool
}

// Limits returns every rate_limit of c that limits (not unlimited), by
// domain in order, then in file order: the limits whose outcomes are known
// before any request, for metrics that start from zero.
func (c *Config) Limits() []Limit {
	var out []Limit
	for _, name := range c.Domains() {
		for _, r := range c.domains[name].rules {
			if !r.unlimited {
				out = append(out, Limit{Domain: name, Path: r.path, Shadow: r.shadow})
			}
		}
	}
	return out
}

// Named returns the limit of the rate_limit named name (rate_limit.name),
// the first in domain order when several domains name one so, for runtime
// overrides (Options.Runtime) to apply to; ok is false when no limited
// rate_limit (requests_per_unit above 0) has the name.
func (c *Config) Named(name string) (lim sluice.Limit, ok bool) {
	for _, dn := range c.Domains() {
		for _, r := range c.domains[dn].rules {
			if r.name == name && !r.unlimited && r.rpu > 0 {
				return r.limit, true
			}
		}
	}
	return lim, false
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
	name     string
	file     string
	root     level
	rules    []*rule  // every rate_limit of the tree, in file order
	counting Counting // the file's sluice.counting; 0: Options.Counting
}

// level is one list of descriptors: the entries a request's descriptor entry
// at this depth is matched against, most specific first.
type level struct {
	exact     map[pair]*node
	wildcards []*node // a '*' in the key or value, in file order
	keyOnly   map[string]*node
	nodes     []*node // every entry, in file order
}

type pair struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string   // value "" means any value; a wildcard keeps its '*'
	glob       []string // a wildcard's pattern split on '*' (see matches)
	share      bool     // share_threshold: every value the wildcard matches shares one counter
	rule       *rule    // nil when the descriptor has no rate_limit
	children   level
	nested     bool // the descriptor has a non-empty descriptors list
}

// lookup finds the entry for (key, value) in l: an exact key and value,
// else the first wildcard (in file order) that matches, else the key with
// any value. viaWildcard reports the second case.
func (l *level) lookup(key, value string) (n *node, viaWildcard bool) {
	if n := l.exact[pair{key, value}]; n != nil {
		return n, false
	}
	for _, n := range l.wildcards {
		if n.matches(key, value) {
			return n, true
		}
	}
	return l.keyOnly[key], false
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
	quota     bool // quota_mode: over the limit refuses only when every quota limit of the request is over
	detailed  bool

	rpu    uint32 // requests_per_unit; 0 refuses every request
	unit   rlspb.RateLimitResponse_RateLimit_Unit
	mult   uint32        // unit_multiplier, at least 1
	period time.Duration // unit × unit_multiplier
	limit  sluice.Limit  // zero when unlimited or rpu is 0
	peer   sluice.Limit  // the limit counted under CountPeer (see peerLimit)

	member string // its name in the RateLimit header fields (see memberName)
	policy string // its RateLimit-Policy member, first in the list (see headers)
}

// ParseConfig compiles one configuration file in envoyproxy/ratelimit's
// format (one domain per file); file names it in errors. Every error is
// reported: the error wraps ErrInvalidConfig and joins one *ConfigError per
// problem (ConfigErrors lists them), each naming the file, line, domain,
// descriptor path and field.
func ParseConfig(file string, data []byte) (*Config, error) {
	d, warns, errs := parseDomain(file, data)
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	return &Config{domains: map[string]*domain{d.name: d}, warnings: warns}, nil
}

// invalid wraps errs in ErrInvalidConfig, one per line.
func invalid(errs []error) error {
	return fmt.Errorf("%w:\n%w", ErrInvalidConfig, errors.Join(errs...))
}

// ConfigError is one error of a configuration file: where it is and what
// is wrong. ParseConfig and LoadConfig return every one found, joined;
// ConfigErrors lists them.
type ConfigError struct {
	File       string
	Line       int    // 0 when the error is about no line in particular
	Domain     string // "" before the file's domain is known
	Descriptor string // the descriptor's path, "remote_address/path=/api"; "" outside one
	Field      string // as the file writes it, dotted ("rate_limit.unit"); "" when Msg names it
	Msg        string // what is wrong
}

// Error formats e as `file:line: domain "d": descriptor PATH: field: msg`,
// leaving out the parts e does not have.
func (e *ConfigError) Error() string {
	desc := ""
	if e.Descriptor != "" {
		desc = "descriptor " + e.Descriptor
	}
	return yamlload.Message(e.File, e.Line, []string{yamlload.Named("domain", e.Domain), desc}, e.Field, e.Msg)
}

// ConfigErrors returns the *ConfigError values err carries (none when err
// is not a configuration error, for example when a file could not be
// read), in the order found.
func ConfigErrors(err error) []*ConfigError { return yamlload.Collect[*ConfigError](err) }

// LoadConfig reads configuration files and compiles them into one Config,
// as LoadConfigWith does with the zero LoadOptions.
func LoadConfig(paths ...string) (*Config, error) {
	return LoadConfigWith(LoadOptions{}, paths...)
}

// LoadOptions changes how LoadConfigWith combines files. The zero value is
// envoyproxy/ratelimit's default.
type LoadOptions struct {
	// MergeDomains merges files that name the same domain into one
	// descriptor tree, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true
	// does; a top-level descriptor defined in two of them is an error.
	// Default false: the same domain in two files is an error.
	MergeDomains bool
}

// LoadConfigWith reads configuration files and compiles them into one
// Config. Each path is a file, or a directory whose files are all read,
// whatever their extension and however deeply nested (not those whose name
// starts with a dot, nor directories reached through a symbolic link), as
// envoyproxy/ratelimit reads its runtime directory. Each file holds one
// domain. A directory without files loads no domain, with a warning.
// Errors of every file are reported together, as ParseConfig reports them;
// warnings are on the Config (Warnings).
func LoadConfigWith(opts LoadOptions, paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no configuration files given", ErrInvalidConfig)
	}
	files, warns, err := ConfigFiles(paths...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg := &Config{domains: map[string]*domain{}, warnings: warns}
	var errs []error
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, dwarns, derrs := parseDomain(f, data)
		cfg.warnings = append(cfg.warnings, dwarns...)
		if len(derrs) > 0 {
			errs = append(errs, derrs...)
			continue
		}
		errs = append(errs, cfg.add(d, opts.MergeDomains)...)
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	return cfg, nil
}

// add puts d into c, merging it with a domain of the same name if merge.
func (c *Config) add(d *domain, merge bool) []error {
	other := c.domains[d.name]
	switch {
	case other == nil:
		c.domains[d.name] = d
		return nil
	case !merge:
		return []error{&ConfigError{File: d.file, Msg: fmt.Sprintf("domain %q is already defined in %s (set merge_domains to merge them)", d.name, other.file)}}
	}
	merged := &domain{name: d.name, file: other.file + ", " + d.file, root: other.root.clone(), rules: append(slices.Clip(other.rules), d.rules...), counting: max(other.counting, d.counting)}
	var errs []error
	if other.counting != 0 && d.counting != 0 && other.counting != d.counting {
		errs = append(errs, &ConfigError{File: d.file, Domain: d.name, Field: "sluice.counting", Msg: fmt.Sprintf("%s here, %s in %s: one domain counts one way", d.counting, other.counting, other.file)})
	}
	for _, n := range d.root.all() {
		if first := merged.root.get(n.key, n.value); first != nil {
			errs = append(errs, &ConfigError{File: d.file, Domain: d.name, Descriptor: join("", n.key, n.value), Msg: "also defined in " + other.file})
			continue
		}
		merged.root.put(n)
	}
	c.domains[d.name] = merged
	return errs
}

// ConfigFiles lists the files LoadConfigWith reads for paths: each file,
// and the files of each directory, nested ones included, in lexical order.
// warns names the directories that hold none.
func ConfigFiles(paths ...string) (files []string, warns []*ConfigError, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		n := len(files)
		err = filepath.WalkDir(p, func(path string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case path == p:
				return nil
			case strings.HasPrefix(e.Name(), "."):
				if e.IsDir() {
					return filepath.SkipDir
				}
				return nil
			case e.IsDir():
				return nil
			case e.Type()&fs.ModeSymlink != 0:
				if st, err := os.Stat(path); err == nil && st.IsDir() {
					return nil // as envoyproxy/ratelimit: a linked directory is not walked
				}
			}
			files = append(files, path)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		if len(files) == n {
			warns = append(warns, &ConfigError{File: p, Msg: "the directory has no configuration files; it configures no domain"})
		}
	}
	return files, warns, nil
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
		return nil, &ConfigError{File: path, Msg: fmt.Sprintf("larger than %d bytes", maxFileSize)}
	}
	return data, nil
}

// parseDomain compiles one file; errs and warns are its *ConfigError
// values.
func parseDomain(file string, data []byte) (d *domain, warns []*ConfigError, errs []error) {
	if len(data) > maxFileSize {
		return nil, nil, []error{&ConfigError{File: file, Msg: fmt.Sprintf("%d bytes, larger than %d", len(data), maxFileSize)}}
	}
	l := newLoader(file)
	doc, more, err := yamlload.Decode(data)
	if se, _ := err.(*yamlload.SyntaxError); se != nil {
		l.FailAt(se.Line, where{}, "", "%s", se.Msg)
		return nil, nil, l.Errs
	}
	if more > 0 { // envoyproxy/ratelimit reads the first document only
		l.warn(&yaml.Node{Line: more}, where{}, "", "a second YAML document is ignored; write one domain per file")
	}
	d = l.domain(doc)
	for _, w := range l.warns {
		warns = append(warns, w.(*ConfigError))
	}
	return d, warns, l.Errs
}

// loader walks the YAML tree, collecting errors.
type loader struct {
	yamlload.Loader[where]
	file   string
	nodes  int
	warns  []error
	shaped map[shaped]bool // the nodes shape checked
	block  blockReader     // the sluice blocks, on this loader's errors
}

// blockReader reads sluice's own blocks of a file (sluice: at the top and
// in a rate_limit), reporting to the loader it is part of.
type blockReader struct {
	*yamlload.Loader[where]
}

func newLoader(file string) *loader {
	l := &loader{file: file}
	l.block = blockReader{&l.Loader}
	l.New = func(line int, w where, field, msg string) error {
		return &ConfigError{File: file, Line: line, Domain: w.domain, Descriptor: w.path, Field: field, Msg: msg}
	}
	return l
}

// maxNodes bounds the descriptors of one file, so a hostile or generated
// file cannot build an unbounded tree (YAML aliases can multiply nodes).
const maxNodes = 100_000

// where is the place an error is about.
type where struct {
	domain, path string
}

func (l *loader) domain(doc *yaml.Node) *domain {
	d := &domain{file: l.file}
	if doc == nil || len(doc.Content) == 0 || yamlload.IsNull(yamlload.Resolve(doc.Content[0])) {
		l.FailAt(0, where{}, "", "the file is empty; it needs a domain")
		return d
	}
	top := yamlload.Resolve(doc.Content[0])
	l.shape(top, where{}, "", true) // a float anywhere is refused, as envoyproxy/ratelimit refuses it
	f := l.fields(top, where{}, "", topFields)
	if n := f["domain"]; n == nil {
		l.Fail(top, where{}, "domain", "missing: every file names the domain its descriptors belong to")
	} else if s, ok := l.Str(n, where{}, "domain"); ok {
		if s == "" {
			l.Fail(n, where{}, "domain", "must not be empty")
		}
		d.name = s
	}
	w := where{domain: d.name}
	if n := f["descriptors"]; n != nil {
		d.root = l.level(n, w, "", d, 1)
	}
	if n := f["sluice"]; n != nil {
		d.counting = l.block.domainOptions(n, w)
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
			if !names[name] { // envoyproxy/ratelimit accepts it: it replaces nothing
				l.warn(&yaml.Node{Line: r.lines[i]}, where{domain: d.name, path: r.path}, "rate_limit.replaces.name", "no rate_limit of this domain is named %q; it replaces nothing", name)
			}
		}
	}
	return d
}

// level reads a descriptors list.
func (l *loader) level(n *yaml.Node, w where, parent string, d *domain, depth int) level {
	lv := level{exact: map[pair]*node{}, keyOnly: map[string]*node{}}
	if yamlload.IsNull(n) {
		return lv
	}
	if depth > ceiling.Entries {
		l.warn(n, where{domain: w.domain, path: parent}, "descriptors", "nested deeper than %d levels, which no request can reach (a descriptor has at most %d entries); ignored", ceiling.Entries, ceiling.Entries)
		return lv
	}
	if n.Kind != yaml.SequenceNode {
		l.Fail(n, w, "descriptors", "want a list of descriptors (got %s)", yamlload.Show(n))
		return lv
	}
	lines := map[pair]int{}
	for _, c := range n.Content {
		c = yamlload.Resolve(c)
		if l.nodes++; l.nodes > maxNodes {
			if l.nodes == maxNodes+1 { // report it once
				l.Fail(c, w, "descriptors", "more than %d descriptors in one file", maxNodes)
			}
			return lv
		}
		nd, line := l.descriptor(c, w, parent, d, depth)
		if nd == nil {
			continue
		}
		p := pair{nd.key, nd.value}
		if first, dup := lines[p]; dup {
			l.Fail(c, where{domain: w.domain, path: join(parent, nd.key, nd.value)}, "",
				"appears twice in the same list (first at line %d)", first)
			continue
		}
		lines[p] = line
		lv.put(nd)
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
			if v := yamlload.Resolve(n.Content[i+1]); n.Content[i].Value == field && v.Kind == yaml.ScalarNode && !yamlload.IsNull(v) {
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
	f := l.fields(n, here, "", descriptorFields)
	if len(f) == 0 && n.Kind != yaml.MappingNode {
		return nil, 0
	}
	nd := &node{}
	ok := l.keyValue(f, n, here, nd)
	path := here.path
	flags := l.flags(f, here, nd)
	if v := f["metadata"]; v != nil {
		l.metadata(v, here)
	}
	if v := f["rate_limit"]; v != nil && yamlload.IsNull(v) {
		l.warn(v, here, "rate_limit", "empty: the descriptor has no limit")
	} else if v != nil {
		nd.rule = l.descriptorLimit(v, f, here, flags, d)
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

// keyValue reads a descriptor's key and value into nd; ok is false when
// the key is missing or not a non-empty string.
func (l *loader) keyValue(f map[string]*yaml.Node, n *yaml.Node, here where, nd *node) (ok bool) {
	if v := f["value"]; v != nil {
		if s, sok := l.Str(v, here, "value"); sok {
			nd.value = s
		}
	}
	k := f["key"]
	if k == nil {
		l.Fail(n, here, "key", "missing: every descriptor has a key")
		return false
	}
	s, ok := l.Str(k, here, "key")
	if ok && s == "" {
		l.Fail(k, here, "key", "must not be empty")
		return false
	}
	nd.key = s
	return ok
}

// descriptorLimit compiles a descriptor's rate_limit with its flags and
// adds it to d's rules; nil when it does not compile.
func (l *loader) descriptorLimit(v *yaml.Node, f map[string]*yaml.Node, here where, flags map[string]bool, d *domain) *rule {
	r := l.rateLimit(v, here)
	if r == nil {
		return nil
	}
	r.path, r.shadow, r.quota, r.detailed = here.path, flags["shadow_mode"], flags["quota_mode"], flags["detailed_metric"]
	r.prebuild()
	if r.unlimited && r.shadow {
		l.warn(f["shadow_mode"], here, "shadow_mode", "an unlimited descriptor is never over its limit")
	}
	d.rules = append(d.rules, r)
	return r
}

// flags reads a descriptor's boolean fields. shadow_mode, quota_mode and
// detailed_metric apply to its rate_limit (without one they do nothing:
// a warning); share_threshold needs a wildcard, as envoyproxy/ratelimit
// requires.
func (l *loader) flags(f map[string]*yaml.Node, w where, nd *node) map[string]bool {
	out := map[string]bool{}
	for _, name := range []string{"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"} {
		v := f[name]
		if v == nil {
			continue
		}
		out[name] = l.unquoted(v, w, name) && l.Bool(v, w, name)
		switch {
		case name == "share_threshold" && out[name] && !wildcard(nd.key, nd.value):
			l.Fail(v, w, name, "applies only to a wildcard value (one with a '*')")
		case name != "value_to_metric" && name != "share_threshold" && out[name] && f["rate_limit"] == nil:
			l.warn(v, w, name, "applies only to a descriptor with a rate_limit; ignored")
		}
	}
	nd.share = out["share_threshold"]
	return out
}

func (l *loader) rateLimit(n *yaml.Node, w where) *rule {
	f := l.fields(n, w, "rate_limit", rateLimitFields)
	if len(f) == 0 && n.Kind != yaml.MappingNode {
		return nil
	}
	before := len(l.Errs)
	r := &rule{mult: 1}
	if v := f["name"]; v != nil {
		if s, ok := l.Str(v, w, "rate_limit.name"); ok {
			if s == "" {
				l.warn(v, w, "rate_limit.name", "empty: the limit has no name")
			}
			r.name = s
		}
	}
	if v := f["replaces"]; v != nil {
		r.replaces, r.lines = l.replaces(v, w, r.name)
	}
	if v := f["unlimited"]; v != nil {
		r.unlimited = l.unquoted(v, w, "rate_limit.unlimited") && l.Bool(v, w, "rate_limit.unlimited")
	}
	if r.unlimited {
		l.unlimited(f, w)
		return r
	}
	l.rate(f, n, w, r)
	if len(l.Errs) > before {
		return nil
	}
	r.period *= time.Duration(r.mult)
	var ext extension
	if v := f["sluice"]; v != nil {
		ext = l.block.extension(v, w)
	}
	if len(l.Errs) > before {
		return nil
	}
	ext.unit, ext.mult = r.unit, r.mult
	lim, err := ext.limit(int64(r.rpu), r.period)
	if err != nil {
		l.block.limitError(err, n, f, ext, w)
		return nil
	}
	r.limit, r.peer = lim, peerLimit(lim, r.rpu, r.period)
	return r
}

// unlimited checks the other fields of an unlimited rate_limit: a unit of
// time is an error, as in envoyproxy/ratelimit; a unit it does not know or
// a requests_per_unit it ignores, with a warning; sluice's own fields are
// errors.
func (l *loader) unlimited(f map[string]*yaml.Node, w where) {
	for _, field := range []string{"unit", "requests_per_unit", "unit_multiplier", "sluice"} {
		v := f[field]
		if v == nil {
			continue
		}
		switch {
		case field == "requests_per_unit" || field == "unit" && !isUnit(v.Value):
			l.warn(v, w, "rate_limit."+field, "an unlimited rate_limit takes no %s; ignored", field)
		default:
			l.Fail(v, w, "rate_limit."+field, "an unlimited rate_limit takes no %s", field)
		}
	}
}

func isUnit(s string) bool {
	for _, u := range units {
		if strings.EqualFold(s, u.name) {
			return true
		}
	}
	return false
}

// rate reads a rate_limit's unit, requests_per_unit and unit_multiplier.
func (l *loader) rate(f map[string]*yaml.Node, n *yaml.Node, w where, r *rule) {
	unit := f["unit"]
	if unit == nil {
		l.Fail(n, w, "rate_limit.unit", "missing (want %s, or unlimited: true)", unitNames)
	} else if s, ok := l.Str(unit, w, "rate_limit.unit"); ok {
		found := false
		for _, u := range units {
			if strings.EqualFold(s, u.name) {
				r.unit, r.period, found = u.pb, u.d, true
			}
		}
		if !found {
			l.Fail(unit, w, "rate_limit.unit", "unknown unit %q (want %s)", s, unitNames)
		}
	}
	if v := f["requests_per_unit"]; v == nil {
		l.warn(n, w, "rate_limit.requests_per_unit", "missing: 0, which refuses every request")
	} else if l.unquoted(v, w, "rate_limit.requests_per_unit") {
		if x, ok := l.Int(v, w, "rate_limit.requests_per_unit", 0, math.MaxUint32); ok {
			r.rpu = uint32(x)
		}
	}
	if v := f["unit_multiplier"]; v != nil {
		if x, ok := l.Int(v, w, "rate_limit.unit_multiplier", 0, math.MaxUint32); ok {
			if x == 0 {
				l.Fail(v, w, "rate_limit.unit_multiplier", "must be at least 1 (leave it out for 1)")
			}
			r.mult = uint32(x)
		}
	}
}

func (l *loader) replaces(n *yaml.Node, w where, own string) ([]string, []int) {
	if n.Kind != yaml.SequenceNode {
		l.Fail(n, w, "rate_limit.replaces", "want a list of {name: NAME} (got %s)", yamlload.Show(n))
		return nil, nil
	}
	var out []string
	var lines []int
	for _, c := range n.Content {
		c = yamlload.Resolve(c)
		f := l.fields(c, w, "rate_limit.replaces", replacesFields)
		v := f["name"]
		if v == nil {
			if c.Kind == yaml.MappingNode {
				l.Fail(c, w, "rate_limit.replaces", "each entry needs a name")
			}
			continue
		}
		s, ok := l.Str(v, w, "rate_limit.replaces.name")
		switch {
		case !ok:
		case s == "":
			l.Fail(v, w, "rate_limit.replaces.name", "must not be empty")
		case s == own:
			l.Fail(v, w, "rate_limit.replaces.name", "%q is this rate_limit's own name", s)
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
	// calendar (calendar: true, or a timezone) makes a day, week, month or
	// year unit a calendar period of zone.
	calendar bool
	zone     string
	// version is the limit's sluice.Limit.Version: changing it starts
	// every counter afresh, where a change of anything else keeps them.
	version uint32
	unit    rlspb.RateLimitResponse_RateLimit_Unit // the rate_limit's, set by rule
	mult    uint32
	f       map[string]*yaml.Node // the block's fields, for errors
}

// calendarUnits are the units that can be calendar periods.
var calendarUnits = map[rlspb.RateLimitResponse_RateLimit_Unit]sluice.Calendar{
	rlspb.RateLimitResponse_RateLimit_DAY:   sluice.Day,
	rlspb.RateLimitResponse_RateLimit_WEEK:  sluice.Week,
	rlspb.RateLimitResponse_RateLimit_MONTH: sluice.Month,
	rlspb.RateLimitResponse_RateLimit_YEAR:  sluice.Year,
}

// extFields returns the fields of the sluice block alg takes besides
// algorithm: its parameters other than the rate, which unit and
// requests_per_unit give.
func extFields(alg sluice.Algorithm) []string {
	return slices.DeleteFunc(alg.Fields(), func(f string) bool {
		return f == "limit" || f == "window" || f == "rate" || f == "lease_ttl"
	})
}

// algorithmNames lists the algorithms a rate_limit can use, for messages.
func algorithmNames() string {
	var names []string
	for _, a := range sluice.Algorithms() {
		if !algo.Leases(a) {
			names = append(names, a.String())
		}
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// extension reads a rate_limit's sluice block: its algorithm and the
// parameters the algorithm takes.
func (b blockReader) extension(n *yaml.Node, w where) extension {
	ext := extension{alg: sluice.AlgorithmFixedWindow, burst: -1, queue: -1}
	f := b.Fields(n, w, "rate_limit.sluice", "algorithm", "burst", "queue", "nodelay", "warmup", "calendar", "timezone", "version")
	ext.f = f
	if v := f["algorithm"]; v != nil {
		s, ok := b.Str(v, w, "rate_limit.sluice.algorithm")
		alg, err := sluice.ParseAlgorithm(s)
		switch {
		case !ok:
			return ext
		case algo.Leases(alg):
			b.Fail(v, w, "rate_limit.sluice.algorithm", "concurrency limits requests in flight and needs each one released when it ends, which the rate limit service protocol cannot do; use sluice's gateway or middleware for it")
			return ext
		case err != nil:
			b.Fail(v, w, "rate_limit.sluice.algorithm", "unknown algorithm %q (want %s)", s, algorithmNames())
			return ext
		}
		ext.alg = alg
	}
	takes := extFields(ext.alg)
	for k, v := range f {
		if k != "algorithm" && k != "version" && !slices.Contains(takes, k) {
			what := "nothing else"
			if len(takes) > 0 {
				what = strings.Join(takes, ", ")
			}
			b.Fail(v, w, "rate_limit.sluice."+k, "not used by %s (it takes %s)", ext.alg, what)
		}
	}
	b.extParams(f, n, w, &ext)
	return ext
}

// extParams reads the parameters of the sluice block.
func (b blockReader) extParams(f map[string]*yaml.Node, n *yaml.Node, w where, ext *extension) {
	const maxBurst = 1 << 32
	if v := f["burst"]; v != nil {
		ext.burst, _ = b.Int(v, w, "rate_limit.sluice.burst", 1, maxBurst)
	}
	if v := f["queue"]; v != nil {
		ext.queue, _ = b.Int(v, w, "rate_limit.sluice.queue", 0, maxBurst)
	} else if slices.Contains(ext.alg.Fields(), "queue") {
		b.Fail(n, w, "rate_limit.sluice.queue", "missing: leaky_bucket needs the number of requests that may wait")
	}
	if v := f["nodelay"]; v != nil {
		ext.nodelay, _ = b.Int(v, w, "rate_limit.sluice.nodelay", 0, maxBurst)
	}
	if v := f["warmup"]; v != nil {
		if d, ok := b.Duration(v, w, "rate_limit.sluice.warmup"); ok && d <= 0 {
			b.Fail(v, w, "rate_limit.sluice.warmup", "must be positive (got %s)", v.Value)
		} else {
			ext.warmup = d
		}
	} else if slices.Contains(ext.alg.Fields(), "warmup") {
		b.Fail(n, w, "rate_limit.sluice.warmup", "missing: warm_up needs the time the rate takes to climb")
	}
	if v := f["calendar"]; v != nil {
		ext.calendar = b.Bool(v, w, "rate_limit.sluice.calendar")
	}
	if v := f["timezone"]; v != nil {
		ext.zone, _ = b.Str(v, w, "rate_limit.sluice.timezone")
		ext.calendar = ext.calendar || f["calendar"] == nil
	}
	if v := f["version"]; v != nil {
		ver, _ := b.Int(v, w, "rate_limit.sluice.version", 0, math.MaxUint32)
		ext.version = uint32(ver)
	}
}

// calendarLimit makes lim, a fixed window of ext's unit, a calendar window
// when the sluice block asks for one.
func (ext extension) calendarLimit(lim *sluice.Limit) error {
	unit, ok := calendarUnits[ext.unit]
	switch {
	case !ext.calendar:
		return nil
	case !ok:
		return &sluice.LimitError{Algorithm: lim.Algorithm, Field: "calendar", Reason: "applies to the units day, week, month and year", Err: sluice.ErrInvalidLimit}
	case ext.mult > 1:
		return &sluice.LimitError{Algorithm: lim.Algorithm, Field: "calendar", Reason: fmt.Sprintf("applies to one unit at a time (unit_multiplier is %d)", ext.mult), Err: sluice.ErrInvalidLimit}
	}
	lim.Calendar, lim.Zone, lim.Period = unit, ext.zone, 0
	return nil
}

// limit builds the sluice.Limit of n requests per period under ext. n == 0
// refuses every request and needs no limit.
func (ext extension) limit(n int64, period time.Duration) (sluice.Limit, error) {
	if n == 0 {
		return sluice.Limit{}, nil
	}
	if ext.alg == 0 {
		ext.alg = sluice.AlgorithmFixedWindow
	}
	lim := sluice.Limit{Algorithm: ext.alg, Count: n, Period: period, Version: ext.version}
	for _, field := range extFields(ext.alg) {
		switch field {
		case "burst":
			lim.Burst = ext.burst
			if lim.Burst < 0 {
				lim.Burst = n // default: one unit's worth
			}
		case "queue":
			lim.Burst = ext.queue
		case "nodelay":
			lim.NoDelay = ext.nodelay
		case "warmup":
			lim.Warmup = ext.warmup
		case "calendar", "timezone":
			if err := ext.calendarLimit(&lim); err != nil {
				return lim, err
			}
		default: // a parameter of a new algorithm this loader does not read
			return lim, fmt.Errorf("rls: %s takes %s, which this loader cannot read", ext.alg, field)
		}
	}
	return lim, lim.Validate()
}

// limitError reports a rate_limit whose limit Validate refused, at the
// field that sets the parameter at fault: requests_per_unit for the count,
// unit for the period, the sluice block's field for the others.
func (b blockReader) limitError(err error, n *yaml.Node, f map[string]*yaml.Node, ext extension, w where) {
	var le *sluice.LimitError
	if !errors.As(err, &le) {
		b.Fail(n, w, "rate_limit", "%v", err)
		return
	}
	field, at, msg := "rate_limit.sluice."+le.Field, ext.f[le.Field], le.Reason
	switch le.Field {
	case "count":
		field, at, msg = "rate_limit.requests_per_unit", f["requests_per_unit"], le.Detail()
	case "window", "period":
		field, at, msg = "rate_limit.unit", f["unit"], le.Detail()
	}
	if at == nil { // a default, such as the burst of one unit's worth
		field, at, msg = "rate_limit", n, le.Detail()
	}
	b.Fail(at, w, field, "%s", msg)
}
