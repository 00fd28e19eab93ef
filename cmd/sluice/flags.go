package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/server"
)

// parseFlags parses a command's flags. done reports that the command ends
// here, with code: --help (0; fs.Usage printed on stdout) or a bad command
// line (2; a short error on stderr, with a "did you mean" for a mistyped
// flag and a pointer to --help). Arguments after the flags are refused
// unless positional.
func parseFlags(fs *flag.FlagSet, args []string, positional bool, stdout, stderr io.Writer) (code int, done bool) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package would print it on every error
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stdout)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return exitOK, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for every flag.\n", fs.Name(), flagError(fs, err), fs.Name())
		return exitUsage, true
	}
	if !positional && fs.NArg() > 0 {
		why := "flags only"
		if name, ok := boolBefore(fs, args); ok {
			why = fmt.Sprintf("--%s takes no value: write --%s alone, or --%s=%s", name, name, name, fs.Arg(0))
		}
		fmt.Fprintf(stderr, "%s: unexpected argument %q (%s)\nRun '%s --help' for every flag.\n", fs.Name(), fs.Arg(0), why, fs.Name())
		return exitUsage, true
	}
	return 0, false
}

// boolBefore reports that the first argument left after parsing is a
// true or false written after a flag that takes none (--redis-require
// true), and names that flag.
func boolBefore(fs *flag.FlagSet, args []string) (string, bool) {
	if _, err := strconv.ParseBool(fs.Arg(0)); err != nil {
		return "", false
	}
	i := len(args) - fs.NArg() - 1
	if i < 0 || i >= len(args) {
		return "", false
	}
	name := strings.TrimLeft(args[i], "-")
	f := fs.Lookup(name)
	if f == nil || !strings.HasPrefix(args[i], "-") {
		return "", false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return name, ok && b.IsBoolFlag()
}

// flagError rewrites the flag package's error in sluice's spelling
// (--name), with the closest flag for an unknown one.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if near := nearestFlag(fs, name); near != "" {
			return fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, near)
		}
		return fmt.Sprintf("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Sprintf("--%s needs a value (--%s=VALUE)", strings.TrimLeft(name, "-"), strings.TrimLeft(name, "-"))
	}
	// invalid value "x" for flag -name: why
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if v, after, ok := strings.Cut(rest, " for flag -"); ok {
			name, why, _ := strings.Cut(after, ": ")
			why = strings.TrimPrefix(why, "parse error")
			if why == "" || strings.Contains(why, "strconv.") {
				why = "not a valid " + flagKind(fs.Lookup(name))
			}
			return fmt.Sprintf("--%s=%s: %s", name, v, why)
		}
	}
	return strings.ReplaceAll(msg, " -", " --")
}

// flagKind names what a flag's value must be, for errors.
func flagKind(f *flag.Flag) string {
	if f == nil {
		return "value"
	}
	switch name, _ := flag.UnquoteUsage(f); name {
	case "int", "uint":
		return "whole number"
	case "duration":
		return "duration (such as 500ms or 2s)"
	case "float":
		return "number"
	case "":
		return "boolean (true or false)"
	}
	return "value"
}

// nearestFlag returns the flag of fs closest to name: one that starts
// with it or that it starts with, or one a few edits away; "" if none is
// close.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3 // more than two edits away is no suggestion
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && (strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name)) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b (flag names: short).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// printFlags lists fs's flags as --name VALUE, each with its help and
// its default: the flag's own, or defaults[name] for flags whose value
// is a setting applied later (sluice serve's).
func printFlags(w io.Writer, fs *flag.FlagSet, defaults map[string]string) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, help := flag.UnquoteUsage(f)
		switch kind {
		case "value":
			kind = "VALUE"
		case "":
		default:
			kind = strings.ToUpper(kind)
		}
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		def := f.DefValue
		if d, ok := defaults[f.Name]; ok {
			def = d
		}
		if !strings.Contains(help, "(default") && !zeroDefault(f, def) {
			help += " (default " + quoteDefault(def) + ")"
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(help, "\n", "\n      "))
	})
}

// zeroDefault reports that a default need not be printed: a false
// boolean, an empty string, or a Func flag with no known default.
func zeroDefault(f *flag.Flag, def string) bool {
	if def == "" {
		return true
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && def == "false" {
		return true
	}
	return false
}

func quoteDefault(v string) string {
	if strings.ContainsAny(v, " ,'\"") {
		return strconv.Quote(v)
	}
	return v
}

// serveDefaults are the defaults of serve's setting flags whose help does
// not say them: server.Defaults(), as each flag would set it.
func serveDefaults() map[string]string {
	d := server.Defaults()
	return map[string]string{
		"gateway":          d.Gateway,
		"api":              d.API,
		"grpc":             d.GRPC,
		"admin":            d.Admin,
		"store":            d.Store.Type,
		"max-keys":         strconv.Itoa(d.Store.MaxKeys),
		"shutdown-timeout": time.Duration(d.ShutdownTimeout).String(),
		"log-level":        d.Log.Level,
		"log-format":       d.Log.Format,
		"watch":            "true",
		"redis-mode":       "standalone",
		"redis-db":         "0",
	}
}
