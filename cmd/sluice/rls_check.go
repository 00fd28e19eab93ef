package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/server/rls"
)

// checkRLS validates one Envoy rate limit service config file.
func checkRLS(path string, data []byte) (string, error) {
	cfg, err := rls.ParseConfig(path, data)
	if err != nil { // drop the "invalid" prefix: INVALID says it
		msg := strings.TrimPrefix(err.Error(), rls.ErrInvalidConfig.Error()+":")
		return "", errors.New(strings.TrimPrefix(strings.TrimSpace(msg), "\n"))
	}
	return fmt.Sprintf("Envoy RLS config, domain %s", strings.Join(cfg.Domains(), ", ")), nil
}
