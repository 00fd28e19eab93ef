// Package config is sluice serve's configuration: the Config (the YAML
// file's fields), the one table of settings (Settings) through which the
// file, the SLUICE_* environment variables and the flags all set it, and
// its validation.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/httpname"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/envoy"
	"github.com/sluicehq/sluice/server/listen"
)

// Config is everything sluice serve needs. It is read from a YAML file
// (LoadConfig), then SLUICE_* environment variables (ApplyEnv), then
// command-line flags, each overriding the one before; Validate checks the
// result. The zero value plus Defaults is the newcomer's setup: memory
// store, the sample policy, the built-in demo upstream.
type Config struct {
	// Listen addresses; an empty one turns that listener off.
	Gateway string `yaml:"gateway"` // reverse proxy applying the policy
	API     string `yaml:"api"`     // decision API: POST /v1/check
	GRPC    string `yaml:"grpc"`    // Envoy rate limit service
	Admin   string `yaml:"admin"`   // /metrics, /healthz, /readyz, /status

	// Upstream is the URL the gateway forwards admitted requests to.
	// Empty: the built-in demo upstream answers them.
	Upstream string `yaml:"upstream"`

	// Policy is the policy file the gateway and the decision API apply.
	// Empty: the embedded sample policy (see `sluice serve --help`).
	Policy string `yaml:"policy"`

	// RLS lists the Envoy rate limit descriptor configs (files, or
	// directories read as rls.LoadConfigWith reads them) of the gRPC
	// service.
	RLS []string `yaml:"rls"`

	// Envoy is what envoyproxy/ratelimit deployments migrate with: the
	// /json and /healthcheck listener, merged domains, response headers.
	Envoy EnvoyConfig `yaml:"envoy"`

	// Watch reloads the policy and RLS configs when their files change,
	// each prices_file of the policy included (SIGHUP always reloads).
	// Default true.
	Watch *bool `yaml:"watch"`

	Store StoreConfig `yaml:"store"`

	// ShutdownTimeout bounds how long in-flight requests may take to
	// finish after SIGTERM. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`

	// MaxDelay bounds the shaping delay the gateway waits before
	// forwarding a request. Default 1s.
	MaxDelay Duration `yaml:"max_delay"`

	// DegradedHeader, if set, is a response header field the gateway
	// sends ("true") on requests a failure mode decided while the store
	// (Redis) could not. Off by default: it tells clients about your
	// infrastructure.
	DegradedHeader string `yaml:"degraded_header"`

	// ShowKeys shows key values (client addresses, API tokens, e-mail
	// addresses: whatever the keys are made of) in the refusal logs, the
	// status page, /status.json and sluice keys list. Default false: each
	// value shows as a mask instead (decide.KeyText), the same for one
	// value for the life of the process, beside the limit's name.
	ShowKeys bool `yaml:"show_keys"`

	// Timeouts bound how long a client may take over a request, on every
	// listener.
	Timeouts TimeoutConfig `yaml:"timeouts"`

	// MaxConns bounds the open connections of each of the gateway, api
	// and grpc listeners; past it a new connection is refused at once (an
	// HTTP listener answers 503 and closes it). Default 4096; -1 means no
	// bound. A gateway connection costs two file descriptors (the client's
	// and the upstream's): keep the sum under the process's limit.
	MaxConns int `yaml:"max_conns"`

	// MaxHeaderBytes bounds the request line and header fields of a
	// request on every HTTP listener: a request with more is answered
	// 431 with a problem document (counted in the gateway's responses).
	// Default 64 KiB; from 4 KiB to 16 MiB. A connection reads at most
	// about a quarter more than this before it refuses.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	// AdminMaxConns is the admin listener's own bound, so that probes and
	// scrapes still reach it when the other listeners are full. Default
	// 64; -1 means no bound.
	AdminMaxConns int `yaml:"admin_max_conns"`

	// TLS serves the listeners over TLS.
	TLS TLSConfig `yaml:"tls"`

	// Auth asks callers of the decision API and the admin listener for a
	// token.
	Auth AuthConfig `yaml:"auth"`

	// SettleTTL is how long a settle token of the decision API can be
	// redeemed (POST /v1/settle) after its /v1/check. Default 5m; at
	// most 24h.
	SettleTTL Duration `yaml:"settle_ttl"`

	// SettleSecretFile holds the secret that signs settle tokens (at least
	// 32 bytes), shared by every instance on one Redis, so that a token
	// issued by one settles at any other, once in all (the spent mark
	// lives in the store). Default: a random secret per process; a token
	// then settles only where it was issued.
	SettleSecretFile string `yaml:"settle_secret_file"`

	// StateDir is the directory where a server on the memory store keeps
	// what must outlive a restart: the runtime overrides
	// (overrides.json). Created if missing. Default none: those live in
	// memory only. On Redis they are kept in Redis instead.
	StateDir string `yaml:"state_dir"`

	// Pprof serves Go's profiler under /debug/pprof/ on the admin
	// listener. Default false: a profile costs CPU and shows internals.
	Pprof bool `yaml:"pprof"`

	Log LogConfig `yaml:"log"`
}

// EnvoyConfig holds the settings envoyproxy/ratelimit deployments migrate
// with. Its zero value keeps sluice's defaults.
type EnvoyConfig = envoy.Config

// TLSConfig turns on TLS (HTTPS, gRPC over TLS) and client certificates.
type TLSConfig = listen.TLSConfig

// TimeoutConfig bounds slow clients; zero fields take the defaults.
type TimeoutConfig struct {
	// ReadHeader bounds the wait for a request's line and header fields,
	// from the moment the connection opens or the previous response ends
	// (and, on the grpc listener, for the connection's handshake).
	// Default 10s.
	ReadHeader Duration `yaml:"read_header"`
	// Read bounds reading the whole request, header and body: a body that
	// trickles in longer is cut. Default 30s; raise it for the gateway if
	// clients upload large bodies over slow links.
	Read Duration `yaml:"read"`
	// Idle closes a keep-alive connection (a gRPC connection without
	// calls) that sends no request for this long. Default 2m.
	Idle Duration `yaml:"idle"`
}

// StoreConfig chooses where limit state lives.
type StoreConfig struct {
	// Type is "memory" (the default) or "redis".
	Type string `yaml:"type"`
	// MaxKeys bounds the memory store (and the fallback store). Default
	// 100,000.
	MaxKeys int         `yaml:"max_keys"`
	Redis   RedisConfig `yaml:"redis"`
}

// RedisConfig connects to Redis: one address for a standalone server,
// several for a Cluster, or Sentinel addresses with MasterName.
type RedisConfig struct {
	Addrs      []string `yaml:"addrs"`
	Cluster    bool     `yaml:"cluster"`
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"`
	// Password is better given as SLUICE_REDIS_PASSWORD, or in
	// PasswordFile, than in a config file.
	Password string `yaml:"password"`
	// PasswordFile holds the password (its first line), read again for
	// each new connection, so a rotated password needs no restart.
	PasswordFile string `yaml:"password_file"`
	// TLS connects over TLS.
	TLS RedisTLSConfig `yaml:"tls"`
	DB  int            `yaml:"db"`
	// Prefix starts every key. Default "sluice:".
	Prefix string `yaml:"prefix"`
	// NearCache is how many refused keys are answered locally until their
	// retry time. Default 10,000; -1 turns it off.
	NearCache int `yaml:"near_cache"`
	// Timeout bounds each call to Redis; a call that takes longer counts
	// as a failure and its request is decided by its failure mode.
	// Default 50ms.
	Timeout Duration `yaml:"timeout"`
	// OnError is the failure mode of requests whose policy rule names
	// none, and of requests no rule covers (Envoy RLS descriptors,
	// explicit checks of the decision API): fallback (a local limit, the
	// default), open (admit) or closed (refuse). Policy rules choose their
	// own with action.on_error.
	OnError string `yaml:"on_error"`
	// FallbackScale multiplies limits decided locally while Redis is
	// down. Default: 1/N, N being the number of sluice instances sharing
	// the Redis and prefix, which they count through a key
	// (PREFIX+"instances") each refreshes every second; set it to fix the
	// scale, above 1/N for an uneven load balancer.
	FallbackScale float64 `yaml:"fallback_scale"`
	// Require makes sluice serve refuse to start when Redis does not
	// answer at start (a wrong address or password). Default false: it
	// starts, warns, and decides by the failure modes until Redis answers.
	Require bool `yaml:"require"`
	// Breaker tunes the circuit breaker in front of Redis.
	Breaker BreakerConfig `yaml:"breaker"`
	// Leases turns on quota leases: hot keys are decided from units taken
	// from Redis ahead of use, a script call per lease instead of per
	// decision, never above the limit (fixed_window, token_bucket and gcra;
	// see docs/serve.md). Off by default.
	Leases LeasesConfig `yaml:"leases"`
}

// LeasesConfig tunes quota leases (redisstore.LeaseConfig); zero values
// take redisstore's defaults.
type LeasesConfig struct {
	Enabled bool     `yaml:"enabled"`
	Traffic Duration `yaml:"traffic"` // default 50ms: a lease covers this much of the instance's own traffic
	Share   int64    `yaml:"share"`   // default 16: a lease is at most 1/share of the limit's capacity
	Hold    Duration `yaml:"hold"`    // default 250ms: unspent units go back to Redis after this
	Keys    int      `yaml:"keys"`    // default 10,000: keys holding a lease at once
}

// BreakerConfig tunes the circuit breaker (package failover); zero values
// take failover's defaults.
type BreakerConfig struct {
	ConsecutiveFailures int      `yaml:"consecutive_failures"` // default 5
	FailureRatio        float64  `yaml:"failure_ratio"`        // default 0.5
	MinCalls            int      `yaml:"min_calls"`            // default 20
	Window              Duration `yaml:"window"`               // default 10s
	ProbeInterval       Duration `yaml:"probe_interval"`       // default 1s
}

// LogConfig sets the log output.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Format string `yaml:"format"` // text (default) or json
}

// Duration is a time.Duration written as in policy files ("250ms", "1m",
// "1d").
type Duration time.Duration

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := policy.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Default listen addresses: loopback, so that nothing is exposed until an
// operator says so (the Dockerfile and manifests listen on all interfaces).
const (
	DefaultGateway = "127.0.0.1:8080"
	DefaultGRPC    = "127.0.0.1:8081"
	DefaultAdmin   = "127.0.0.1:8082"
	DefaultAPI     = "127.0.0.1:8083"
)

// Defaults returns the configuration of `sluice serve` with no file, flag
// or variable.
func Defaults() Config {
	return Config{
		Gateway:         DefaultGateway,
		GRPC:            DefaultGRPC,
		Admin:           DefaultAdmin,
		API:             DefaultAPI,
		ShutdownTimeout: Duration(10 * time.Second),
		MaxDelay:        Duration(time.Second),
		Store:           StoreConfig{Type: "memory", MaxKeys: 100_000},
		Log:             LogConfig{Level: "info", Format: "text"},
	}
}

// maxConfigSize bounds a configuration file.
const maxConfigSize = 1 << 20

// LoadConfig reads the YAML file at path over base (normally Defaults()):
// fields the file sets replace base's. Unknown fields are errors naming the
// file and line.
func LoadConfig(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("config: %w", err)
	}
	if len(data) > maxConfigSize {
		return base, fmt.Errorf("config: %s: %d bytes, larger than %d", path, len(data), maxConfigSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	cfg := base
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			se := yamlload.Syntax(err)
			se.Locate(data)
			return base, fileError(path, se)
		}
		var errs []error
		for _, e := range te.Errors {
			se := yamlload.Syntax(errors.New(e))
			// yaml's "field gatway not found in type server.Config" is
			// "unknown field gatway" in the file's terms.
			if f, ok := strings.CutPrefix(se.Msg, "field "); ok {
				if name, _, ok := strings.Cut(f, " not found in type"); ok {
					se.Msg = "unknown field " + name
				}
			}
			errs = append(errs, fileError(path, se))
		}
		return base, errors.Join(errs...)
	}
	return cfg, nil
}

// fileError is an error of the configuration file at path:
// "config: sluice.yaml:3: unknown field gatway".
func fileError(path string, se *yamlload.SyntaxError) error {
	if se.Line == 0 {
		return fmt.Errorf("config: %s: %s", path, se.Msg)
	}
	return fmt.Errorf("config: %s:%d: %s", path, se.Line, se.Msg)
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Validate reports every setting that cannot work, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	c.validateListeners(fail)
	if _, err := c.Envoy.ParseCounting(); err != nil {
		fail("envoy.counting", "%q: want all-or-nothing or peer", c.Envoy.Counting)
	}
	if err := c.Envoy.Bounds().Check(); err != nil {
		fail("envoy.max_descriptors, max_entries, max_length", "%v", err)
	}
	if c.Gateway == "" && c.API == "" && c.GRPC == "" {
		fail("gateway", "gateway, api and grpc are all off: nothing to serve")
	}
	if c.Upstream != "" {
		u, err := url.Parse(c.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fail("upstream", "%q: want an http:// or https:// URL with a host", c.Upstream)
		}
	}
	switch c.Store.Type {
	case "memory":
	case "redis":
		c.Store.Redis.validate(fail)
	default:
		fail("store.type", "%q: want memory or redis", c.Store.Type)
	}
	c.validateBounds(fail)
	c.TLS.Validate(fail)
	c.Auth.validate(fail)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		fail("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		fail("log.format", "%q: want text or json", c.Log.Format)
	}
	return errors.Join(errs...)
}

// validateListeners checks the listen addresses.
func (c *Config) validateListeners(fail func(field, format string, args ...any)) {
	for _, l := range []struct{ field, addr string }{{"gateway", c.Gateway}, {"api", c.API}, {"grpc", c.GRPC}, {"admin", c.Admin}, {"envoy.http", c.Envoy.HTTP}} {
		if l.addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(l.addr); err != nil {
			fail(l.field, "%q: want host:port, such as 127.0.0.1:8080 or :8080", l.addr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			fail(l.field, "%q: port must be a number from 0 to 65535", l.addr)
		}
	}
}

// validateBounds checks the settings that must be within a range.
func (c *Config) validateBounds(fail func(field, format string, args ...any)) {
	if c.Store.MaxKeys < 0 {
		fail("store.max_keys", "must not be negative (got %d)", c.Store.MaxKeys)
	}
	if c.ShutdownTimeout < 0 {
		fail("shutdown_timeout", "must not be negative")
	}
	for _, t := range []struct {
		field string
		d     Duration
	}{{"timeouts.read_header", c.Timeouts.ReadHeader}, {"timeouts.read", c.Timeouts.Read}, {"timeouts.idle", c.Timeouts.Idle}} {
		if t.d < 0 {
			fail(t.field, "must not be negative")
		}
	}
	if c.MaxConns < -1 {
		fail("max_conns", "want a positive number, 0 for the default or -1 for no bound (got %d)", c.MaxConns)
	}
	if c.AdminMaxConns < -1 {
		fail("admin_max_conns", "want a positive number, 0 for the default or -1 for no bound (got %d)", c.AdminMaxConns)
	}
	if n := c.MaxHeaderBytes; n != 0 && (n < minHeaderBytes || n > maxHeaderBytes) {
		fail("max_header_bytes", "want %d (4 KiB) to %d (16 MiB) bytes, or 0 for the default %d (got %d)", minHeaderBytes, maxHeaderBytes, DefaultMaxHeaderBytes, n)
	}
	if c.MaxDelay < 0 || time.Duration(c.MaxDelay) > time.Minute {
		fail("max_delay", "must be between 0 and 1m")
	}
	if c.SettleTTL < 0 || time.Duration(c.SettleTTL) > 24*time.Hour {
		fail("settle_ttl", "must be between 0 (the default, 5m) and 24h (got %s)", time.Duration(c.SettleTTL))
	}
	if c.DegradedHeader != "" && !httpname.Valid(c.DegradedHeader) {
		fail("degraded_header", "%q is not a header field name", c.DegradedHeader)
	}
}

func (r RedisConfig) validate(fail func(field, format string, args ...any)) {
	if len(r.Addrs) == 0 {
		fail("store.redis.addrs", "missing: redis needs at least one host:port")
	}
	addrs, _ := RedisAddrs(r.Addrs)
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			fail("store.redis.addrs", "%q: want host:port, redis://host:port or rediss://host:port (TLS)", r.Addrs[i])
		}
	}
	if r.Password != "" && r.PasswordFile != "" {
		fail("store.redis.password_file", "password and password_file exclude each other")
	}
	r.TLS.validate(fail)
	if r.Cluster && r.MasterName != "" {
		fail("store.redis.cluster", "cluster and master_name (Sentinel) exclude each other")
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		fail("store.redis.prefix", "%q must not contain { or }", r.Prefix)
	}
	if r.Timeout < 0 {
		fail("store.redis.timeout", "must not be negative")
	}
	if r.OnError != "" {
		if _, err := failover.ParseMode(r.OnError); err != nil {
			fail("store.redis.on_error", "%q: want open, closed or fallback", r.OnError)
		}
	}
	if r.FallbackScale < 0 {
		fail("store.redis.fallback_scale", "must be above 0 (got %v)", r.FallbackScale)
	}
	if l := r.Leases; l.Traffic < 0 || l.Share < 0 || l.Hold < 0 || l.Keys < 0 {
		fail("store.redis.leases", "no setting is negative")
	}
	if b := r.Breaker; b.FailureRatio > 1 || b.ConsecutiveFailures < 0 || b.MinCalls < 0 || b.Window < 0 || b.ProbeInterval < 0 {
		fail("store.redis.breaker", "failure_ratio is at most 1 and no setting is negative")
	}
}

// WatchFiles reports whether file changes trigger reloads.
func (c *Config) WatchFiles() bool { return c.Watch == nil || *c.Watch }

// AuthConfig guards the decision API and the admin listener.
type AuthConfig struct {
	// TokensFile holds the bearer tokens the Listeners accept
	// ("Authorization: Bearer TOKEN"), one a line; blank lines and lines
	// starting with # are skipped. It is read again when it changes.
	// Empty: no tokens are asked for.
	TokensFile string `yaml:"tokens_file"`
	// Listeners that ask for a token: api and admin by default. On the
	// admin listener /healthz and /readyz stay open, for probes. A request
	// that came with a client certificate verified against
	// tls.client_ca_file needs no token.
	Listeners []string `yaml:"listeners"`
}

// On returns the listeners that ask for a token (Listeners or its
// default).
func (a AuthConfig) On() []string {
	if a.Listeners == nil {
		return []string{"api", "admin"}
	}
	return a.Listeners
}

func (a AuthConfig) validate(fail func(field, format string, args ...any)) {
	for _, n := range a.Listeners {
		if n != "api" && n != "admin" {
			fail("auth.listeners", "%q: want api or admin", n)
		}
	}
	if a.Listeners != nil && a.TokensFile == "" {
		fail("auth.listeners", "needs auth.tokens_file")
	}
}

// RedisTLSConfig connects to Redis over TLS (redis-server's tls-port).
type RedisTLSConfig struct {
	// Enabled turns TLS on; addresses written rediss://host:port do too.
	Enabled bool `yaml:"enabled"`
	// CAFile holds the CAs (PEM) that sign the servers' certificates.
	// Default: the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are sluice's client certificate and key (PEM),
	// for servers with tls-auth-clients.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the servers' certificates must carry.
	// Default: the host of each address.
	ServerName string `yaml:"server_name"`
}

func (t RedisTLSConfig) validate(fail func(field, format string, args ...any)) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		fail("store.redis.tls", "cert_file and key_file go together")
	}
}

// Defaults of the connection settings (Config.Timeouts, MaxConns,
// AdminMaxConns).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConns          = 4096
	DefaultAdminMaxConns     = 64
	DefaultMaxHeaderBytes    = 64 << 10
)

// The bounds of Config.MaxHeaderBytes.
const (
	minHeaderBytes = 4 << 10
	maxHeaderBytes = 16 << 20
)

// Limits returns the bounds of the listener called name.
func (c *Config) Limits(name string) listen.Limits {
	pick := func(d Duration, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return time.Duration(d)
	}
	l := listen.Limits{
		ReadHeader: pick(c.Timeouts.ReadHeader, DefaultReadHeaderTimeout),
		Read:       pick(c.Timeouts.Read, DefaultReadTimeout),
		Idle:       pick(c.Timeouts.Idle, DefaultIdleTimeout),
		MaxHeader:  cmp.Or(c.MaxHeaderBytes, DefaultMaxHeaderBytes),
	}
	n, def := c.MaxConns, DefaultMaxConns
	if name == "admin" {
		n, def = c.AdminMaxConns, DefaultAdminMaxConns
	}
	switch {
	case n == 0:
		l.MaxConns = def
	case n > 0:
		l.MaxConns = n
	}
	return l
}

// RedisAddrs returns addrs without their redis:// or rediss:// scheme,
// and whether any asked for TLS.
func RedisAddrs(addrs []string) (out []string, tls bool) {
	for _, a := range addrs {
		if rest, ok := strings.CutPrefix(a, "rediss://"); ok {
			a, tls = rest, true
		} else {
			a = strings.TrimPrefix(a, "redis://")
		}
		out = append(out, strings.TrimSuffix(a, "/"))
	}
	return out, tls
}
