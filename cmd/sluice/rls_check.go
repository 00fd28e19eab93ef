package main

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/server/rls"
)

// checkRLS validates one Envoy rate limit service config file.
func checkRLS(path string, data []byte) (string, error) {
	cfg, err := rls.ParseConfig(path, data)
	if err != nil { // each error on a line; INVALID says the file is invalid
		return "", each(err, rls.ConfigErrors(err))
	}
	return fmt.Sprintf("Envoy RLS config, domain %s", strings.Join(cfg.Domains(), ", ")), nil
}
