// Command sluice runs and checks sluice, a rate limiter:
//
//	sluice serve [flags]      run the gateway, decision API, Envoy rate limit service and admin
//	sluice check FILE...      validate policy, RLS and server config files offline
//	sluice simulate [flags]   draw how each algorithm treats a traffic pattern
//	sluice replay [flags]     replay an access log through a policy
//	sluice suggest [flags]    propose limits from an access log and a safe rate
//	sluice keys OP [flags]    list, inspect or reset one key's state on a running server
//	sluice overrides OP [flags] set, list or delete one key's runtime override on a running server
//	sluice version            print the version
//
// `sluice serve` with no flags starts on the memory store with a sample
// policy in front of a built-in demo upstream; `sluice <command> --help`
// lists every flag and environment variable.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = ""

// Exit codes, for scripts and CI.
const (
	exitOK      = 0
	exitInvalid = 1 // sluice check found an invalid file; serve failed
	exitUsage   = 2 // bad command line
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `sluice decides, for every request, whether to admit it, delay it or refuse it.

Usage:
  sluice serve [flags]     run the gateway, decision API, Envoy rate limit service and admin
  sluice check FILE...     validate policy, Envoy RLS and server config files (exit 1 if any is invalid)
  sluice simulate [flags]  draw how each algorithm treats a traffic pattern
  sluice replay [flags]    replay an access log through a policy: who would have been refused, when
  sluice suggest [flags]   propose limits from an access log and a measured safe rate
  sluice keys list|bans|inspect|reset [flags] [RULE LIMIT VALUE...]
                           a running server's limits, its bans, and one key's state: inspect it or start it afresh
  sluice overrides set|list|delete [flags] [LIMIT KEY]
                           change one key's limit while a server runs (scale, unlimited, another limit)
  sluice version           print the version
  sluice help [command]    show help

Run 'sluice serve' with no flags to try it: it listens on 127.0.0.1:8080 in front
of a built-in demo upstream with a sample policy (5 requests at once per client,
then 1 a second). Then:

  curl -i http://127.0.0.1:8080/

and open http://127.0.0.1:8082/status in a browser: the live status page.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if c := slices.IndexFunc(subcommands, func(c subcommand) bool { return c.name == cmd }); c >= 0 {
		return subcommands[c].run(rest, stdout, stderr)
	}
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "sluice", versionString())
		return exitOK
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			return run([]string{rest[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q%s\nRun 'sluice help' for the commands.\n", cmd, nearestCommand(cmd))
		return exitUsage
	}
}

// subcommand is a command of sluice that takes its own arguments.
type subcommand struct {
	name string
	run  func(args []string, stdout, stderr io.Writer) int
}

// subcommands are sluice's commands but version and help, which run
// answers itself.
var subcommands = []subcommand{
	{"serve", serve}, {"check", check}, {"simulate", simulate},
	{"replay", replay}, {"suggest", suggest}, {"keys", keys}, {"overrides", overrides},
}

// commandNames returns the names of sluice's commands.
func commandNames() []string {
	var names []string
	for _, c := range subcommands {
		names = append(names, c.name)
	}
	return append(names, "version", "help")
}

// nearestCommand returns "; did you mean X?" for the command closest to
// cmd, or "" when none is close.
func nearestCommand(cmd string) string { return nearest(cmd, commandNames()) }

// nearest returns "; did you mean X?" for the word of words closest to
// w, or "" when none is close.
func nearest(cmd string, words []string) string {
	best, bestD := "", 3
	for _, c := range words {
		if d := editDistance(cmd, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v + " " + bi.GoVersion
}

// setting is one --name=value of sluice serve, applied in order after the
// config file and the environment.
type setting struct{ name, value string }

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	configPath := fs.String("config", os.Getenv("SLUICE_CONFIG"), "server config file (YAML; env SLUICE_CONFIG)")
	showSample := fs.Bool("sample-policy", false, "print the embedded sample policy and exit")
	set := defineSettingFlags(fs)
	fs.Usage = func() { serveUsage(fs, stdout) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	if *showSample {
		stdout.Write(server.SamplePolicy())
		return exitOK
	}
	cfg, code := serveConfig(*configPath, *set, stderr)
	if code != exitOK {
		return code
	}
	return runServer(cfg, stderr)
}

// defineSettingFlags defines a flag for each setting of server.Settings
// that has one; the settings given are appended to the slice returned,
// in order.
func defineSettingFlags(fs *flag.FlagSet) *[]setting {
	set := new([]setting)
	for _, s := range server.Settings {
		if s.NoFlag != "" {
			continue
		}
		add := func(v string) error {
			*set = append(*set, setting{s.Name, v})
			return nil
		}
		if s.Bool() {
			fs.BoolFunc(s.Name, s.Help, add)
		} else {
			fs.Func(s.Name, s.Help, add)
		}
	}
	return set
}

// serveConfig builds sluice serve's configuration: the defaults, the
// config file, the environment, then the flags, validated.
func serveConfig(path string, set []setting, stderr io.Writer) (server.Config, int) {
	cfg := server.Defaults()
	if path != "" {
		var err error
		if cfg, err = server.LoadConfig(path, cfg); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return cfg, exitInvalid
		}
	}
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "sluice serve: environment: %v\n", err)
		return cfg, exitUsage
	}
	for _, s := range set {
		if err := cfg.Set(s.name, "--"+s.name, s.value); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return cfg, exitUsage
		}
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluice serve: invalid configuration:\n%v\n", indent(err.Error()))
		return cfg, exitInvalid
	}
	return cfg, exitOK
}

// runServer runs the server until SIGTERM or SIGINT, reloading its
// configs on SIGHUP.
func runServer(cfg server.Config, stderr io.Writer) int {
	logger := newLogger(cfg.Log, stderr)
	redis.SetLogger(newRedisLog(logger, time.Now))
	if _, set := os.LookupEnv("GOGC"); !set {
		// sluice's live heap is small (a few MB plus the keys), so the
		// default GOGC=100 collects after every few MB allocated: a fifth
		// of the CPU of an RLS decision went to GC. 400 trades a few more
		// MB of heap for far fewer collections; GOGC overrides it.
		debug.SetGCPercent(400)
	}
	srv, err := server.New(cfg, server.Options{Logger: logger, Version: strings.TrimSuffix(versionString(), " "+runtime.Version())})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitInvalid
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			logger.Info("SIGHUP: reloading configs")
			srv.Reload() // logs and counts its own failures
		}
	}()
	if err := srv.Run(ctx); err != nil {
		logger.Error("sluice serve stopped with an error", "err", err)
		return exitInvalid
	}
	return exitOK
}

func serveUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Usage: sluice serve [flags]

Runs sluice as a gateway (a reverse proxy applying the policy), a decision API
for callers in any language, an Envoy rate limit service, and an admin listener.
With no flags: memory store, the sample policy, the built-in demo upstream, all
on loopback (gateway 127.0.0.1:8080, grpc :8081, admin :8082, api :8083).

Settings come from, each overriding the one before: built-in defaults, the
--config file, SLUICE_* environment variables, then flags.

Flags:
`)
	printFlags(w, fs, serveDefaults())
	fmt.Fprint(w, "\nEnvironment variables (same meaning as the flag or config field):\n")
	for _, s := range server.Settings {
		fmt.Fprintf(w, "  %-36s %s\n", s.Env, s.Fields)
		if s.NoFlag != "" {
			fmt.Fprintf(w, "  %-36s (no flag: %s)\n", "", s.NoFlag)
		}
	}
	fmt.Fprint(w, `
Signals: SIGHUP reloads the policy and RLS configs (a config that fails to load
keeps the old one); SIGTERM or SIGINT stop accepting and drain in-flight
requests within --shutdown-timeout.
`)
}

func newLogger(cfg server.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(cfg.Level)) // validated already
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// redisLog sends go-redis's own log lines (failed dials, mostly) through
// slog at Warn, so that --log-format json holds for every line; each of its
// messages at most once per redisLogEvery, with how many were left out
// since, so that an outage is not one line per dial.
type redisLog struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last map[string]redisLogLine // by format: go-redis has a few dozen
}

type redisLogLine struct {
	at      time.Time
	dropped int
}

// redisLogEvery is the least time between two lines of one go-redis message.
const redisLogEvery = 10 * time.Second

func newRedisLog(l *slog.Logger, now func() time.Time) *redisLog {
	return &redisLog{log: l, now: now, last: map[string]redisLogLine{}}
}

// Printf logs one go-redis line.
func (r *redisLog) Printf(ctx context.Context, format string, v ...any) {
	now := r.now()
	r.mu.Lock()
	prev, seen := r.last[format]
	if seen && now.Sub(prev.at) < redisLogEvery {
		prev.dropped++
		r.last[format] = prev
		r.mu.Unlock()
		return
	}
	r.last[format] = redisLogLine{at: now}
	r.mu.Unlock()
	args := []any{"component", "go-redis"}
	if prev.dropped > 0 {
		args = append(args, "repeated", prev.dropped)
	}
	r.log.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), args...)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// check validates files offline: policies, Envoy RLS configs and server
// configs, telling which by their content unless --kind says.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice check", flag.ContinueOnError)
	kind := fs.String("kind", "auto", "what the files are: auto, policy, rls or server")
	maxDelay := fs.Duration("max-delay", time.Second, "the shaping delay sluice serve allows (its max_delay, --max-delay or SLUICE_MAX_DELAY): a policy's leaky_bucket queue must be served within it")
	quiet := fs.Bool("q", false, "print only errors")
	var rc rlsCheck
	fs.BoolVar(&rc.strict, "strict", false, "Envoy RLS configs: refuse what loads only with a warning (what envoyproxy/ratelimit accepts but a strict reading refuses)")
	fs.BoolVar(&rc.opts.MergeDomains, "rls-merge-domains", false, "Envoy RLS configs: merge files of one domain, as sluice serve --rls-merge-domains")
	fs.Usage = func() {
		fmt.Fprint(stdout, `Usage: sluice check [--kind auto|policy|rls|server] [--max-delay D] [--strict] [--rls-merge-domains] [-q] FILE...

Validates each file and prints what it found, or every error with its file,
line and field. A file is a policy if it has rules:, an Envoy RLS config if it
has domain:, a server config otherwise (--kind overrides). A directory of
Envoy RLS configs is checked whole, as sluice serve --rls loads it (every file,
nested ones too); another directory checks its .yaml files. Exit code: 0 all
valid, 1 some file invalid, 2 usage.

Flags:
`)
		printFlags(stdout, fs, nil)
	}
	if code, done := parseFlags(fs, args, true, stdout, stderr); done {
		return code
	}
	switch *kind {
	case "auto", "policy", "rls", "server":
	default:
		fmt.Fprintf(stderr, "sluice check: --kind %q: want auto, policy, rls or server\n", *kind)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, "sluice check: name at least one file (sluice check --help)\n")
		return exitUsage
	}
	code := exitOK
	for _, arg := range fs.Args() {
		paths := []string{arg}
		if !isRLSDir(arg, *kind) {
			paths = expand(paths)
		}
		for _, path := range paths {
			msg, err := checkFile(path, *kind, *maxDelay, rc)
			if err != nil {
				fmt.Fprintf(stdout, "INVALID %s\n%s\n", path, indent(err.Error()))
				code = exitInvalid
				continue
			}
			if !*quiet {
				fmt.Fprintf(stdout, "ok      %s: %s\n", path, msg)
			}
		}
	}
	return code
}

// expand replaces directories by their .yaml and .yml files.
func expand(args []string) []string {
	var out []string
	for _, a := range args {
		entries, err := os.ReadDir(a)
		if err != nil {
			out = append(out, a) // a file, or an error checkFile reports
			continue
		}
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				out = append(out, filepath.Join(a, n))
			}
		}
	}
	return out
}

func checkFile(path, kind string, maxDelay time.Duration, rc rlsCheck) (string, error) {
	if isRLSDir(path, kind) {
		return rc.checkDir(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if kind == "auto" {
		kind = sniff(data)
	}
	switch kind {
	case "policy":
		p, err := policy.Parse(path, data, policy.Options{MaxDelay: maxDelay})
		if err != nil { // each error on a line; INVALID says the file is invalid
			return "", yamlload.Join(err, policy.Errors(err))
		}
		n := 0
		for _, r := range p.Rules {
			n += len(r.Limits)
		}
		msg := fmt.Sprintf("policy, %d rules, %d limits", len(p.Rules), n)
		if p.Shed != nil {
			msg += ", load shedding (" + p.Shed.Config().Algorithm.Name() + ")"
		}
		for _, w := range p.Warnings {
			msg += "\n  warning: " + w
		}
		return msg, nil
	case "rls":
		return rc.checkRLS(path, data)
	default:
		cfg, err := server.LoadConfig(path, server.Defaults())
		if err != nil {
			return "", err
		}
		if err := cfg.Validate(); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return "server config", nil
	}
}

// sniff tells a policy (rules:) from an RLS config (domain:) from a
// server config by the top-level keys.
func sniff(data []byte) string {
	var top map[string]yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&top) != nil {
		return "policy" // let the policy parser report what is wrong
	}
	switch {
	case top["rules"].Kind != 0:
		return "policy"
	case top["domain"].Kind != 0:
		return "rls"
	}
	return "server"
}
