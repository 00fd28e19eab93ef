package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// ParseLimit reads one limit's algorithm and parameters, written as in a
// policy file but without name, key, cost or overrides:
//
//	{algorithm: token_bucket, rate: 100/s, burst: 20}
//
// JSON is accepted too (it is YAML). file names the source in errors. It is
// for callers that receive limits from elsewhere than a policy file, such
// as sluice serve's decision API.
func ParseLimit(file string, data []byte) (sluice.Limit, error) {
	if len(data) > maxFileSize {
		return sluice.Limit{}, fmt.Errorf("%w: %s: %d bytes, larger than %d", ErrInvalid, file, len(data), maxFileSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return sluice.Limit{}, fmt.Errorf("%w: %s: %s", ErrInvalid, file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	l := &loader{file: file}
	lim := l.limitSpec(&doc)
	if len(l.errs) > 0 {
		return sluice.Limit{}, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(l.errs...))
	}
	return lim, nil
}

func (l *loader) limitSpec(doc *yaml.Node) sluice.Limit {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n = resolve(n); n.Kind != yaml.MappingNode {
		l.fail(n, where{}, "", "want a limit such as {algorithm: token_bucket, rate: 100/s, burst: 20}")
		return sluice.Limit{}
	}
	f := l.fields(n, where{}, "limit", "algorithm", "limit", "window", "rate", "burst", "queue", "nodelay", "warmup", "lease_ttl")
	algNode := f["algorithm"]
	if algNode == nil {
		l.fail(n, where{}, "algorithm", "missing (one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)")
		return sluice.Limit{}
	}
	alg, err := sluice.ParseAlgorithm(l.str(algNode, where{}, "algorithm"))
	if err != nil {
		l.fail(algNode, where{}, "algorithm", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		return sluice.Limit{}
	}
	for k, v := range f {
		if k != "algorithm" && !slices.Contains(limitFields[alg], k) {
			l.fail(v, where{}, k, "not used by %s (it takes %s)", alg, strings.Join(limitFields[alg], ", "))
		}
	}
	return l.parameters(f, where{}, alg, n)
}
