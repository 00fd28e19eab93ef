package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/rls"
)

// Setting is one setting of sluice serve: a row of the one table that the
// config file's fields, the SLUICE_* environment variables, serve's flags
// and their help all go through, so that each setting is reachable all
// three ways and documented once. A new setting is a new row (and its
// Config field); docs/serve.md's table of settings is made from the rows.
type Setting struct {
	// Name is the flag's name without its dashes, and Config.Set's.
	Name string
	// Env is the environment variable.
	Env string
	// Fields are the config file's fields the setting sets, dotted, with
	// how the value is written when the field's form differs.
	Fields string
	// NoFlag, when set, says why the setting has no flag.
	NoFlag string
	// Help says what the setting does, for serve --help and the table of
	// settings in docs/serve.md.
	Help string
	set  setter
}

// Bool reports that the setting is true or false: its flag given alone
// (--show-keys) means true.
func (s Setting) Bool() bool { return s.set.bool }

// Settings are every setting of sluice serve, in the order --help lists
// them.
var Settings = []Setting{
	{Name: "gateway", Env: "SLUICE_GATEWAY", Fields: "gateway", set: text(func(c *Config) *string { return &c.Gateway }),
		Help: "gateway listen address (reverse proxy applying the policy); empty turns it off"},
	{Name: "api", Env: "SLUICE_API", Fields: "api", set: text(func(c *Config) *string { return &c.API }),
		Help: "decision API listen address (POST /v1/check); empty turns it off"},
	{Name: "grpc", Env: "SLUICE_GRPC", Fields: "grpc", set: text(func(c *Config) *string { return &c.GRPC }),
		Help: "Envoy rate limit service listen address (gRPC); empty turns it off"},
	{Name: "admin", Env: "SLUICE_ADMIN", Fields: "admin", set: text(func(c *Config) *string { return &c.Admin }),
		Help: "admin listen address (/metrics, /healthz, /readyz, /status); keep it private"},
	{Name: "upstream", Env: "SLUICE_UPSTREAM", Fields: "upstream", set: text(func(c *Config) *string { return &c.Upstream }),
		Help: "URL the gateway forwards admitted requests to (default: the built-in demo upstream)"},
	{Name: "policy", Env: "SLUICE_POLICY", Fields: "policy", set: text(func(c *Config) *string { return &c.Policy }),
		Help: "policy file (default: the embedded sample policy; see 'sluice serve --sample-policy')"},
	{Name: "max-delay", Env: "SLUICE_MAX_DELAY", Fields: "max_delay", set: duration(func(c *Config) *Duration { return &c.MaxDelay }),
		Help: "longest shaping delay (leaky_bucket) the gateway waits before forwarding; a policy whose queue cannot be served within it is refused at load (default 1s, at most 1m)"},
	{Name: "rls", Env: "SLUICE_RLS", Fields: "rls (comma-separated)", set: list(func(c *Config) *[]string { return &c.RLS }, false),
		Help: "Envoy RLS descriptor configs: files or directories (every file in them, nested ones too), comma-separated"},
	{Name: "watch", Env: "SLUICE_WATCH", Fields: "watch", set: boolPtr(func(c *Config) **bool { return &c.Watch }),
		Help: "reload the policy and RLS configs when their files change, a policy's prices_file included (default true; --watch=false turns it off)"},
	{Name: "rls-http", Env: "SLUICE_RLS_HTTP", Fields: "envoy.http", set: text(func(c *Config) *string { return &c.Envoy.HTTP }),
		Help: "listen address of envoyproxy/ratelimit's HTTP endpoints, /json and /healthcheck (its PORT, 8080); empty turns it off"},
	{Name: "rls-merge-domains", Env: "SLUICE_RLS_MERGE_DOMAINS", Fields: "envoy.merge_domains", set: boolean(func(c *Config) *bool { return &c.Envoy.MergeDomains }),
		Help: "merge RLS config files that name the same domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)"},
	{Name: "rls-response-headers", Env: "SLUICE_RLS_RESPONSE_HEADERS", Fields: "envoy.response_headers", set: boolPtr(func(c *Config) **bool { return &c.Envoy.ResponseHeaders }),
		Help: "add RateLimit and RateLimit-Policy header fields to RLS responses (default true; --rls-response-headers=false turns them off)"},
	{Name: "rls-counting", Env: "SLUICE_RLS_COUNTING", Fields: "envoy.counting", set: setter{set: setCounting},
		Help: "how the RLS counts: all-or-nothing (default; a refused request charges only the limits that refused it) or peer (envoyproxy/ratelimit's: each descriptor on its own, refused hits counted)"},
	{Name: "rls-stop-increment", Env: "SLUICE_RLS_STOP_INCREMENT", Fields: "envoy.stop_increment_when_over_limit", set: boolean(func(c *Config) *bool { return &c.Envoy.StopIncrementWhenOverLimit }),
		Help: "with --rls-counting peer, charge only the descriptors that would be over when any would be (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)"},
	{Name: "rls-healthy-with-config", Env: "SLUICE_RLS_HEALTHY_WITH_CONFIG", Fields: "envoy.healthy_with_config", set: boolean(func(c *Config) *bool { return &c.Envoy.HealthyWithConfig }),
		Help: "/healthcheck and gRPC health of \"ratelimit\" fail while no RLS domain is loaded (envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)"},
	{Name: "rls-shadow-mode", Env: "SLUICE_RLS_SHADOW_MODE", Fields: "envoy.shadow_mode", set: boolean(func(c *Config) *bool { return &c.Envoy.ShadowMode }),
		Help: "answer every RLS request OK overall, descriptor statuses and counting unchanged (envoyproxy/ratelimit's SHADOW_MODE): compare before enforcing"},
	{Name: "rls-quota-mode", Env: "SLUICE_RLS_QUOTA_MODE", Fields: "envoy.quota_mode", set: boolean(func(c *Config) *bool { return &c.Envoy.QuotaMode }),
		Help: "make every RLS limit a quota_mode one (envoyproxy/ratelimit's QUOTA_MODE): a request is over only when all its limited descriptors are"},
	{Name: "rls-max-descriptors", Env: "SLUICE_RLS_MAX_DESCRIPTORS", Fields: "envoy.max_descriptors", set: whole(func(c *Config) *int { return &c.Envoy.MaxDescriptors }, boundWant),
		Help: "most descriptors in one RLS request; more is InvalidArgument (default 64, at most 1024)"},
	{Name: "rls-max-entries", Env: "SLUICE_RLS_MAX_ENTRIES", Fields: "envoy.max_entries", set: whole(func(c *Config) *int { return &c.Envoy.MaxEntries }, boundWant),
		Help: "most entries in one RLS descriptor (default 16, at most 64)"},
	{Name: "rls-max-length", Env: "SLUICE_RLS_MAX_LENGTH", Fields: "envoy.max_length", set: whole(func(c *Config) *int { return &c.Envoy.MaxLength }, boundWant),
		Help: "most bytes of an RLS domain, entry key or entry value (default 1024, at most 65536)"},
	{Name: "store", Env: "SLUICE_STORE", Fields: "store.type", set: text(func(c *Config) *string { return &c.Store.Type }),
		Help: "where limit state lives: memory or redis"},
	{Name: "max-keys", Env: "SLUICE_MAX_KEYS", Fields: "store.max_keys", set: whole(func(c *Config) *int { return &c.Store.MaxKeys }, "want a whole number"),
		Help: "most keys the memory store holds before evicting the least recently used"},
	{Name: "redis-addrs", Env: "SLUICE_REDIS_ADDRS", Fields: "store.redis.addrs (comma-separated)", set: list(func(c *Config) *[]string { return &c.Store.Redis.Addrs }, false),
		Help: "Redis addresses, comma-separated: one server, cluster nodes, or Sentinels"},
	{Name: "redis-mode", Env: "SLUICE_REDIS_MODE", Fields: "store.redis.cluster, store.redis.master_name (standalone, cluster or sentinel:MASTER)", set: setter{set: setRedisMode},
		Help: "standalone, cluster or sentinel:MASTER_NAME"},
	{Name: "redis-username", Env: "SLUICE_REDIS_USERNAME", Fields: "store.redis.username", set: text(func(c *Config) *string { return &c.Store.Redis.Username }),
		Help: "Redis ACL user name (the password: SLUICE_REDIS_PASSWORD or --redis-password-file)"},
	{Name: "redis-password", Env: "SLUICE_REDIS_PASSWORD", Fields: "store.redis.password", set: text(func(c *Config) *string { return &c.Store.Redis.Password }),
		NoFlag: "a flag's value shows in ps and in the shell's history: use SLUICE_REDIS_PASSWORD or --redis-password-file",
		Help:   "Redis password"},
	{Name: "redis-password-file", Env: "SLUICE_REDIS_PASSWORD_FILE", Fields: "store.redis.password_file", set: text(func(c *Config) *string { return &c.Store.Redis.PasswordFile }),
		Help: "file whose first line is the Redis password (read for each new connection); or set SLUICE_REDIS_PASSWORD"},
	{Name: "redis-tls", Env: "SLUICE_REDIS_TLS", Fields: "store.redis.tls.enabled (or rediss:// addresses)", set: boolean(func(c *Config) *bool { return &c.Store.Redis.TLS.Enabled }),
		Help: "connect to Redis over TLS (also: rediss:// addresses)"},
	{Name: "redis-tls-ca", Env: "SLUICE_REDIS_TLS_CA", Fields: "store.redis.tls.ca_file", set: text(func(c *Config) *string { return &c.Store.Redis.TLS.CAFile }),
		Help: "CAs (PEM) that sign the Redis servers' certificates (default: the system's)"},
	{Name: "redis-tls-cert", Env: "SLUICE_REDIS_TLS_CERT", Fields: "store.redis.tls.cert_file", set: text(func(c *Config) *string { return &c.Store.Redis.TLS.CertFile }),
		Help: "client certificate (PEM) for Redis servers with tls-auth-clients"},
	{Name: "redis-tls-key", Env: "SLUICE_REDIS_TLS_KEY", Fields: "store.redis.tls.key_file", set: text(func(c *Config) *string { return &c.Store.Redis.TLS.KeyFile }),
		Help: "the client certificate's key (PEM)"},
	{Name: "redis-tls-server-name", Env: "SLUICE_REDIS_TLS_SERVER_NAME", Fields: "store.redis.tls.server_name", set: text(func(c *Config) *string { return &c.Store.Redis.TLS.ServerName }),
		Help: "name the Redis servers' certificates carry (default: each address's host)"},
	{Name: "redis-db", Env: "SLUICE_REDIS_DB", Fields: "store.redis.db", set: whole(func(c *Config) *int { return &c.Store.Redis.DB }, "want a whole number"),
		Help: "Redis database number (standalone and Sentinel)"},
	{Name: "redis-prefix", Env: "SLUICE_REDIS_PREFIX", Fields: "store.redis.prefix", set: text(func(c *Config) *string { return &c.Store.Redis.Prefix }),
		Help: "prefix of every Redis key sluice writes (default sluice:)"},
	{Name: "redis-near-cache", Env: "SLUICE_REDIS_NEAR_CACHE", Fields: "store.redis.near_cache", set: whole(func(c *Config) *int { return &c.Store.Redis.NearCache }, "want a whole number, or -1 for none"),
		Help: "refused keys answered locally until their retry time, without a Redis call (default 10000; -1 off)"},
	{Name: "redis-timeout", Env: "SLUICE_REDIS_TIMEOUT", Fields: "store.redis.timeout", set: duration(func(c *Config) *Duration { return &c.Store.Redis.Timeout }),
		Help: "deadline of each Redis call (default 50ms)"},
	{Name: "redis-on-error", Env: "SLUICE_REDIS_ON_ERROR", Fields: "store.redis.on_error", set: text(func(c *Config) *string { return &c.Store.Redis.OnError }),
		Help: "when Redis fails, for rules without on_error and requests no rule covers (RLS, explicit API checks): fallback (default), open or closed"},
	{Name: "fallback-scale", Env: "SLUICE_FALLBACK_SCALE", Fields: "store.redis.fallback_scale", set: number(func(c *Config) *float64 { return &c.Store.Redis.FallbackScale }, "want a number, such as 0.25"),
		Help: "scale of limits decided locally while Redis is down (default 1/N, N the instances sharing Redis, counted)"},
	{Name: "redis-require", Env: "SLUICE_REDIS_REQUIRE", Fields: "store.redis.require", set: boolean(func(c *Config) *bool { return &c.Store.Redis.Require }),
		Help: "refuse to start when Redis does not answer at start"},
	{Name: "redis-breaker-failures", Env: "SLUICE_REDIS_BREAKER_FAILURES", Fields: "store.redis.breaker.consecutive_failures", set: whole(func(c *Config) *int { return &c.Store.Redis.Breaker.ConsecutiveFailures }, "want a whole number"),
		Help: "consecutive Redis failures that open the circuit breaker (default 5)"},
	{Name: "redis-breaker-failure-ratio", Env: "SLUICE_REDIS_BREAKER_FAILURE_RATIO", Fields: "store.redis.breaker.failure_ratio", set: number(func(c *Config) *float64 { return &c.Store.Redis.Breaker.FailureRatio }, "want a number, such as 0.5"),
		Help: "share of failed Redis calls in --redis-breaker-window that opens the breaker (default 0.5)"},
	{Name: "redis-breaker-min-calls", Env: "SLUICE_REDIS_BREAKER_MIN_CALLS", Fields: "store.redis.breaker.min_calls", set: whole(func(c *Config) *int { return &c.Store.Redis.Breaker.MinCalls }, "want a whole number"),
		Help: "fewest calls in the window before the failure ratio counts (default 20)"},
	{Name: "redis-breaker-window", Env: "SLUICE_REDIS_BREAKER_WINDOW", Fields: "store.redis.breaker.window", set: duration(func(c *Config) *Duration { return &c.Store.Redis.Breaker.Window }),
		Help: "the window the failure ratio is measured over (default 10s)"},
	{Name: "redis-breaker-probe-interval", Env: "SLUICE_REDIS_BREAKER_PROBE_INTERVAL", Fields: "store.redis.breaker.probe_interval", set: duration(func(c *Config) *Duration { return &c.Store.Redis.Breaker.ProbeInterval }),
		Help: "how often an open breaker probes Redis (default 1s)"},
	{Name: "redis-leases", Env: "SLUICE_REDIS_LEASES", Fields: "store.redis.leases.enabled", set: boolean(func(c *Config) *bool { return &c.Store.Redis.Leases.Enabled }),
		Help: "decide hot keys from quota leases taken from Redis ahead of use, never above the limit (tune with --redis-leases-*)"},
	{Name: "redis-leases-traffic", Env: "SLUICE_REDIS_LEASES_TRAFFIC", Fields: "store.redis.leases.traffic", set: duration(func(c *Config) *Duration { return &c.Store.Redis.Leases.Traffic }),
		Help: "with --redis-leases, a lease covers this much of the instance's own traffic (default 50ms)"},
	{Name: "redis-leases-share", Env: "SLUICE_REDIS_LEASES_SHARE", Fields: "store.redis.leases.share", set: whole(func(c *Config) *int64 { return &c.Store.Redis.Leases.Share }, "want a whole number"),
		Help: "with --redis-leases, a lease is at most 1/share of the limit's capacity (default 16)"},
	{Name: "redis-leases-hold", Env: "SLUICE_REDIS_LEASES_HOLD", Fields: "store.redis.leases.hold", set: duration(func(c *Config) *Duration { return &c.Store.Redis.Leases.Hold }),
		Help: "with --redis-leases, unspent units go back to Redis after this (default 250ms)"},
	{Name: "redis-leases-keys", Env: "SLUICE_REDIS_LEASES_KEYS", Fields: "store.redis.leases.keys", set: whole(func(c *Config) *int { return &c.Store.Redis.Leases.Keys }, "want a whole number"),
		Help: "with --redis-leases, most keys holding a lease at once (default 10000)"},
	{Name: "shutdown-timeout", Env: "SLUICE_SHUTDOWN_TIMEOUT", Fields: "shutdown_timeout", set: duration(func(c *Config) *Duration { return &c.ShutdownTimeout }),
		Help: "how long in-flight requests may take to finish after SIGTERM"},
	{Name: "degraded-header", Env: "SLUICE_DEGRADED_HEADER", Fields: "degraded_header", set: text(func(c *Config) *string { return &c.DegradedHeader }),
		Help: "response header marking requests decided while Redis was down, e.g. Sluice-Degraded (default off)"},
	{Name: "show-keys", Env: "SLUICE_SHOW_KEYS", Fields: "show_keys", set: boolean(func(c *Config) *bool { return &c.ShowKeys }),
		Help: "show key values (client addresses, tokens) in refusal logs and on the status page instead of masks"},
	{Name: "read-header-timeout", Env: "SLUICE_READ_HEADER_TIMEOUT", Fields: "timeouts.read_header", set: duration(func(c *Config) *Duration { return &c.Timeouts.ReadHeader }),
		Help: "longest wait for a request's header, on every listener (default 10s)"},
	{Name: "read-timeout", Env: "SLUICE_READ_TIMEOUT", Fields: "timeouts.read", set: duration(func(c *Config) *Duration { return &c.Timeouts.Read }),
		Help: "longest time to read a whole request, header and body (default 30s)"},
	{Name: "idle-timeout", Env: "SLUICE_IDLE_TIMEOUT", Fields: "timeouts.idle", set: duration(func(c *Config) *Duration { return &c.Timeouts.Idle }),
		Help: "close keep-alive connections idle this long (default 2m)"},
	{Name: "max-conns", Env: "SLUICE_MAX_CONNS", Fields: "max_conns", set: whole(func(c *Config) *int { return &c.MaxConns }, connsWant),
		Help: "most open connections per listener (gateway, api, grpc); -1 no bound (default 4096)"},
	{Name: "admin-max-conns", Env: "SLUICE_ADMIN_MAX_CONNS", Fields: "admin_max_conns", set: whole(func(c *Config) *int { return &c.AdminMaxConns }, connsWant),
		Help: "most open connections of the admin listener (default 64)"},
	{Name: "max-header-bytes", Env: "SLUICE_MAX_HEADER_BYTES", Fields: "max_header_bytes", set: whole(func(c *Config) *int { return &c.MaxHeaderBytes }, "want a whole number of bytes"),
		Help: "most bytes of a request's line and header fields, on every HTTP listener; more is a 431 (default 65536)"},
	{Name: "tls-cert", Env: "SLUICE_TLS_CERT", Fields: "tls.cert_file", set: text(func(c *Config) *string { return &c.TLS.CertFile }),
		Help: "server certificate (PEM, with its chain): TLS on the gateway, api and grpc listeners; reloaded when it changes"},
	{Name: "tls-key", Env: "SLUICE_TLS_KEY", Fields: "tls.key_file", set: text(func(c *Config) *string { return &c.TLS.KeyFile }),
		Help: "the server certificate's key (PEM)"},
	{Name: "tls-client-ca", Env: "SLUICE_TLS_CLIENT_CA", Fields: "tls.client_ca_file", set: text(func(c *Config) *string { return &c.TLS.ClientCAFile }),
		Help: "CAs (PEM) whose client certificates the tls-client-auth listeners require (mutual TLS)"},
	{Name: "tls-listeners", Env: "SLUICE_TLS_LISTENERS", Fields: "tls.listeners (comma-separated)", set: list(func(c *Config) *[]string { return &c.TLS.Listeners }, true),
		Help: "listeners that serve TLS, comma-separated (default gateway,api,grpc)"},
	{Name: "tls-client-auth", Env: "SLUICE_TLS_CLIENT_AUTH", Fields: "tls.client_auth (comma-separated)", set: list(func(c *Config) *[]string { return &c.TLS.ClientAuth }, true),
		Help: "listeners that require a client certificate, comma-separated (default api,grpc)"},
	{Name: "auth-tokens", Env: "SLUICE_AUTH_TOKENS", Fields: "auth.tokens_file", set: text(func(c *Config) *string { return &c.Auth.TokensFile }),
		Help: "file of bearer tokens (one a line) the decision API and admin ask for; reloaded when it changes"},
	{Name: "auth-listeners", Env: "SLUICE_AUTH_LISTENERS", Fields: "auth.listeners (comma-separated)", set: list(func(c *Config) *[]string { return &c.Auth.Listeners }, true),
		Help: "listeners that ask for a token, comma-separated (default api,admin; admin's /healthz and /readyz stay open)"},
	{Name: "settle-ttl", Env: "SLUICE_SETTLE_TTL", Fields: "settle_ttl", set: duration(func(c *Config) *Duration { return &c.SettleTTL }),
		Help: "how long a decision API settle token can be redeemed after its check (default 5m, at most 24h)"},
	{Name: "settle-secret-file", Env: "SLUICE_SETTLE_SECRET_FILE", Fields: "settle_secret_file", set: text(func(c *Config) *string { return &c.SettleSecretFile }),
		Help: "file of the secret (at least 32 bytes) that signs settle tokens, shared by the instances on one Redis (default: random per process)"},
	{Name: "state-dir", Env: "SLUICE_STATE_DIR", Fields: "state_dir", set: text(func(c *Config) *string { return &c.StateDir }),
		Help: "directory where a server on the memory store keeps its runtime overrides (overrides.json) across restarts (default none: in memory only; on Redis they are kept in Redis)"},
	{Name: "pprof", Env: "SLUICE_PPROF", Fields: "pprof", set: boolean(func(c *Config) *bool { return &c.Pprof }),
		Help: "serve Go's profiler at /debug/pprof/ on the admin listener"},
	{Name: "log-level", Env: "SLUICE_LOG_LEVEL", Fields: "log.level", set: text(func(c *Config) *string { return &c.Log.Level }),
		Help: "debug, info, warn or error"},
	{Name: "log-format", Env: "SLUICE_LOG_FORMAT", Fields: "log.format", set: text(func(c *Config) *string { return &c.Log.Format }),
		Help: "text or json"},
}

// settingByName indexes Settings.
var settingByName = func() map[string]*Setting {
	m := make(map[string]*Setting, len(Settings))
	for i := range Settings {
		m[Settings[i].Name] = &Settings[i]
	}
	return m
}()

// ApplyEnv sets the fields whose SLUICE_* variable lookup finds (normally
// os.LookupEnv). A variable that is set but empty clears a listen address
// (turning that listener off) and is ignored elsewhere.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	for _, s := range Settings {
		v, ok := lookup(s.Env)
		if !ok {
			continue
		}
		if err := c.Set(s.Name, s.Env, v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Set sets one setting by its name (Setting.Name), as the flags and
// ApplyEnv do; from names the origin in errors ("--store", "SLUICE_STORE").
func (c *Config) Set(name, from, v string) error {
	s, ok := settingByName[name]
	if !ok {
		return fmt.Errorf("%s: unknown setting", from)
	}
	if err := s.set.set(c, v); err != nil {
		return fmt.Errorf("%s=%q: %v", from, v, err)
	}
	return nil
}

// setter parses one setting's value into the field it stands for; bool
// says the value is true or false.
type setter struct {
	set  func(c *Config, v string) error
	bool bool
}

const boundWant = "want a whole number, 0 for the default"

const connsWant = "want a whole number, or -1 for no bound"

func text(field func(*Config) *string) setter {
	return setter{set: func(c *Config, v string) error { *field(c) = v; return nil }}
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

func boolean(field func(*Config) *bool) setter {
	return setter{bool: true, set: func(c *Config, v string) error {
		b, err := parseBool(v)
		if err == nil {
			*field(c) = b
		}
		return err
	}}
}

// boolPtr sets a *bool, whose nil is the default.
func boolPtr(field func(*Config) **bool) setter {
	return setter{bool: true, set: func(c *Config, v string) error {
		b, err := parseBool(v)
		if err == nil {
			*field(c) = &b
		}
		return err
	}}
}

func whole[T int | int64](field func(*Config) *T, want string) setter {
	return setter{set: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || int64(T(n)) != n {
			return errors.New(want)
		}
		*field(c) = T(n)
		return nil
	}}
}

func number(field func(*Config) *float64, want string) setter {
	return setter{set: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errors.New(want)
		}
		*field(c) = f
		return nil
	}}
}

func duration(field func(*Config) *Duration) setter {
	return setter{set: func(c *Config, v string) error {
		d, err := policy.ParseDuration(v)
		if err != nil {
			return err
		}
		*field(c) = Duration(d)
		return nil
	}}
}

// list sets a comma-separated list; with keepEmpty, an empty value means
// none rather than the default.
func list(field func(*Config) *[]string, keepEmpty bool) setter {
	return setter{set: func(c *Config, v string) error {
		l := splitList(v)
		if l == nil && keepEmpty {
			l = []string{}
		}
		*field(c) = l
		return nil
	}}
}

func setCounting(c *Config, v string) error {
	if _, err := rls.ParseCounting(v); err != nil {
		return errors.New("want all-or-nothing or peer")
	}
	c.Envoy.Counting = v
	return nil
}

func setRedisMode(c *Config, v string) error {
	r := &c.Store.Redis
	switch {
	case v == "standalone":
		r.Cluster, r.MasterName = false, ""
	case v == "cluster":
		r.Cluster, r.MasterName = true, ""
	case strings.HasPrefix(v, "sentinel:") && len(v) > len("sentinel:"):
		r.Cluster, r.MasterName = false, strings.TrimPrefix(v, "sentinel:")
	default:
		return errors.New("want standalone, cluster or sentinel:MASTER")
	}
	return nil
}
