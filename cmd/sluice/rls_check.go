package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/server/rls"
)

// rlsCheck is how sluice check reads Envoy RLS configs.
type rlsCheck struct {
	strict bool            // warnings are errors
	opts   rls.LoadOptions // as sluice serve --rls-merge-domains
}

// checkRLS validates one Envoy rate limit service config file.
func (c rlsCheck) checkRLS(path string, data []byte) (string, error) {
	cfg, err := rls.ParseConfig(path, data)
	return c.result(cfg, err)
}

// checkDir validates a directory of Envoy RLS configs as sluice serve
// --rls DIR loads it: every file in it, nested ones included, together
// (one domain in two files is an error unless merged).
func (c rlsCheck) checkDir(dir string) (string, error) {
	cfg, err := rls.LoadConfigWith(c.opts, dir)
	return c.result(cfg, err)
}

func (c rlsCheck) result(cfg *rls.Config, err error) (string, error) {
	if err != nil { // each error on a line; INVALID says the file is invalid
		return "", yamlload.Join(err, rls.ConfigErrors(err))
	}
	if c.strict && len(cfg.Warnings()) > 0 {
		return "", yamlload.Join(errors.New("warnings"), cfg.Warnings())
	}
	msg := fmt.Sprintf("Envoy RLS config, domain %s", strings.Join(cfg.Domains(), ", "))
	for _, w := range cfg.Warnings() {
		msg += "\n  warning: " + w.Error()
	}
	return msg, nil
}

// isRLSDir reports whether sluice check reads path as a directory of
// Envoy RLS configs: a directory, with --kind rls, or with --kind auto
// when one of its files is one.
func isRLSDir(path, kind string) bool {
	if st, err := os.Stat(path); err != nil || !st.IsDir() || kind != "auto" && kind != "rls" {
		return false
	}
	if kind == "rls" {
		return true
	}
	files, _, err := rls.ConfigFiles(path)
	if err != nil {
		return false
	}
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && sniff(data) == "rls" {
			return true
		}
	}
	return false
}
