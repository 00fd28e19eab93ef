package policy

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlload"
)

// ParseLimit reads one limit's algorithm and parameters, written as in a
// policy file but without name, key, cost or overrides:
//
//	{algorithm: token_bucket, rate: 100/s, burst: 20}
//
// JSON is accepted too (it is YAML). file names the source in errors. It is
// for callers that receive limits from elsewhere than a policy file, such
// as sluice serve's decision API. The error wraps ErrInvalid and joins one
// *Error per problem (Errors lists them).
func ParseLimit(file string, data []byte) (sluice.Limit, error) {
	if len(data) > maxFileSize {
		return sluice.Limit{}, invalid(" ", &Error{File: file, Msg: fmt.Sprintf("%d bytes, larger than %d", len(data), maxFileSize)})
	}
	l := newLoader(file, Options{})
	var lim sluice.Limit
	if doc, ok := l.decode(data, "a limit is one document"); ok {
		lim = l.limitSpec(doc)
	}
	if len(l.Errs) > 0 {
		return sluice.Limit{}, invalid(" ", l.Errs...)
	}
	return lim, nil
}

func (l *loader) limitSpec(doc *yaml.Node) sluice.Limit {
	var n *yaml.Node
	if doc != nil && len(doc.Content) > 0 {
		n = yamlload.Resolve(doc.Content[0])
	}
	if n == nil || n.Kind != yaml.MappingNode {
		l.Fail(n, where{}, "", "want a limit such as {algorithm: token_bucket, rate: 100/s, burst: 20}")
		return sluice.Limit{}
	}
	f := l.Item(n, where{}, "limit", append([]string{"algorithm", "version"}, paramFields...)...)
	alg, ok := l.algorithm(f, n, where{}, []string{"algorithm", "version"})
	if !ok {
		return sluice.Limit{}
	}
	lim := l.parameters(f, where{}, alg, n)
	lim.Version = l.version(f["version"], where{})
	return lim
}
