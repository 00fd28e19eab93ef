package policy

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/llmusage"
)

// tokenFields are the fields of a cost read from an LLM call.
var tokenFields = []string{"answer", "default_max_tokens", "chars_per_token", "max_request_bytes", "default_price"}

// priceFileFields are the fields of a file of prices (prices_file).
var priceFileFields = []string{"prices", "default_price"}

// tokenCost reads a cost read from an LLM call (the fields f of cost):
//
//	cost: {tokens: total, answer: auto, default_max_tokens: 1024, max: 20000}
//
// The request reserves its prompt's estimate and its maximum output
// (decide.TokenCost); the answer's usage settles what it used.
func (l *loader) tokenCost(f map[string]*yaml.Node, w where, lim *Limit) {
	for _, k := range []string{"reserve", "response_header", "on_missing", "strip"} {
		if f[k] != nil {
			l.Fail(f[k], w, "cost."+k, "does not apply to tokens: the request's maximum is reserved, the answer's usage settles, and an answer without usage is charged an estimate")
		}
	}
	if algo.Leases(lim.Limit.Algorithm) {
		l.Fail(f["tokens"], w, "cost", "%s cannot settle a cost after the response (it counts requests in flight, not what they cost)", lim.Limit.Algorithm)
	}
	t := &decide.TokenCost{}
	switch pf := f["prices_file"]; {
	case pf != nil && (f["prices"] != nil || f["default_price"] != nil):
		l.Fail(pf, w, "cost.prices_file", "give prices (and default_price) or prices_file, not both")
	case pf != nil:
		t.Prices = l.pricesFile(pf, w)
	case f["prices"] != nil:
		t.Prices = l.prices(f["prices"], f["default_price"], w)
	case f["default_price"] != nil:
		l.Fail(f["default_price"], w, "cost.default_price", "applies only with prices")
	}
	if t.Prices != nil && f["tokens"] != nil {
		l.Fail(f["tokens"], w, "cost.tokens", "a cost is tokens or a price (prices), not both: use two limits")
	}
	if n := f["tokens"]; n != nil {
		t.Measure = l.measure(n, w)
	}
	if a := f["answer"]; a != nil {
		t.Format = l.answerFormat(a, w)
	}
	if v := f["default_max_tokens"]; v != nil {
		t.DefaultMaxOutput, _ = l.Int(v, w, "cost.default_max_tokens", 1, llmusage.MaxCount)
	}
	if v := f["chars_per_token"]; v != nil {
		t.CharsPerToken, _ = l.Int(v, w, "cost.chars_per_token", 1, 64)
	}
	if v := f["max_request_bytes"]; v != nil {
		t.MaxRequestBytes, _ = l.Int(v, w, "cost.max_request_bytes", 1, 1<<30)
	}
	lim.cost = 1 // each request reserves what it asks for (decide.Reserve)
	lc := &decide.LateCost{Tokens: t, Max: max(1, lim.Limit.Capacity())}
	if m := f["max"]; m != nil {
		most := int64(maxLateCost)
		if lim.Limit.Validate() == nil {
			most = min(most, lim.Limit.Capacity()+lim.Limit.MaxAdjust())
		}
		if n, ok := l.Int(m, w, "cost.max", 1, most); ok {
			lc.Max = n
		}
	}
	lim.late = lc
}

// measure reads what a token cost counts: input, output or total.
func (l *loader) measure(n *yaml.Node, w where) llmusage.Measure {
	s, ok := l.Str(n, w, "cost.tokens")
	if !ok {
		return llmusage.Total
	}
	m, err := llmusage.ParseMeasure(s)
	if err != nil {
		l.Fail(n, w, "cost.tokens", "%q: want input, output or total", s)
	}
	return m
}

// answerFormat reads where answers report their usage: openai,
// anthropic, auto, or a mapping of JSON pointers {input, output, total}.
func (l *loader) answerFormat(v *yaml.Node, w where) *llmusage.Format {
	if v.Kind == yaml.MappingNode {
		f := l.Fields(v, w, "cost.answer", "input", "output", "total")
		var ptrs [3]string
		for i, k := range []string{"input", "output", "total"} {
			if f[k] != nil {
				ptrs[i], _ = l.Str(f[k], w, "cost.answer."+k)
			}
		}
		format, err := llmusage.Pointers(ptrs[0], ptrs[1], ptrs[2])
		if err != nil {
			l.Fail(v, w, "cost.answer", "%v", err)
		}
		return format
	}
	s, ok := l.Str(v, w, "cost.answer")
	if !ok {
		return nil
	}
	format, err := llmusage.ParseFormat(s)
	if err != nil {
		l.Fail(v, w, "cost.answer", "%q: want openai, anthropic, auto, or JSON pointers {input: /usage/in, output: /usage/out}", s)
	}
	return format
}

// thousandths reads a share of a limit's capacity (soft, when.above): a number
// above 0 and at most 1 (0.8), or a percentage (80%); it returns
// thousandths.
func (l *loader) thousandths(v *yaml.Node, w where, field string) int64 {
	s, ok := l.Str(v, w, field)
	if !ok {
		return 0
	}
	scale := 1000.0
	if p, cut := strings.CutSuffix(s, "%"); cut {
		s, scale = p, 10
	}
	f, err := strconv.ParseFloat(s, 64)
	n := int64(math.Round(f * scale))
	if err != nil || math.IsNaN(f) || n < 1 || n > 1000 {
		l.Fail(v, w, field, "%q: want a share of the limit above 0 and at most 1 (0.8) or a percentage (80%%)", v.Value)
		return 0
	}
	return n
}

// maxModels bounds a price table.
const maxModels = 10000

// prices reads a price table (v) and the price of the models it does not
// list (def, nil when absent: those are refused):
//
//	prices: {gpt-4o: {input: 2.50, output: 10}}
//	default_price: {input: 15, output: 75}
//
// Prices are currency units per million tokens, with at most six
// decimals; the limit counts millionths of the unit.
func (l *loader) prices(v, def *yaml.Node, w where) *llmusage.Prices {
	ps := &llmusage.Prices{Models: map[string]llmusage.Price{}}
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		l.Fail(v, w, "cost.prices", "want a mapping of model names to {input, output} prices per million tokens")
		return ps
	}
	if len(v.Content)/2 > maxModels {
		l.Fail(v, w, "cost.prices", "more than %d models", maxModels)
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		model := v.Content[i].Value
		field := "cost.prices." + model
		if _, dup := ps.Models[model]; dup {
			l.Fail(v.Content[i], w, field, "appears twice")
		}
		if model == "" || len(model) > llmusage.MaxModel {
			l.Fail(v.Content[i], w, field, "a model name is 1 to %d bytes", llmusage.MaxModel)
		}
		ps.Models[model] = l.price(yamlload.Resolve(v.Content[i+1]), w, field)
	}
	if def != nil {
		p := l.price(def, w, "cost.default_price")
		ps.Default = &p
	}
	return ps
}

// price reads {input, output}: prices per million tokens.
func (l *loader) price(v *yaml.Node, w where, field string) llmusage.Price {
	f := l.Fields(v, w, field, "input", "output")
	var p llmusage.Price
	for _, k := range []string{"input", "output"} {
		n := f[k]
		if n == nil {
			l.Fail(v, w, field+"."+k, "missing: the price of a million %s tokens", k)
			continue
		}
		price, err := llmusage.ParsePrice(n.Value)
		if err != nil || n.Kind != yaml.ScalarNode {
			l.Fail(n, w, field+"."+k, "%q: want a price per million tokens, in units with at most 6 decimals (2.50)", n.Value)
		}
		if k == "input" {
			p.Input = price
		} else {
			p.Output = price
		}
	}
	return p
}

// pricesFile reads the price table of the file v names (relative to the
// policy's directory): a document of prices and default_price, as a
// limit's cost has them. Its errors name that file; it is read again
// whenever the policy is, and Holder.Files lists it.
func (l *loader) pricesFile(v *yaml.Node, w where) *llmusage.Prices {
	name, ok := l.Str(v, w, "cost.prices_file")
	if !ok || name == "" {
		l.Fail(v, w, "cost.prices_file", "want the path of a file of prices")
		return nil
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(filepath.Dir(l.file), name)
	}
	if fi, err := os.Stat(name); err == nil && fi.IsDir() {
		l.Fail(v, w, "cost.prices_file", "%s is a directory: want a file of prices", name)
		return nil // not listed by Holder.Files: a watcher would watch all below it
	}
	if !slices.Contains(l.priceFiles, name) {
		l.priceFiles = append(l.priceFiles, name)
	}
	data, err := readBounded(name)
	if err != nil {
		l.Fail(v, w, "cost.prices_file", "%v", err)
		return nil
	}
	sub := newLoader(name, l.opts)
	var ps *llmusage.Prices
	if doc, ok := sub.decode(data, "a file of prices is one document"); ok && doc != nil && len(doc.Content) > 0 {
		f := sub.Fields(doc.Content[0], w, "", priceFileFields...)
		if f["prices"] == nil {
			sub.Fail(doc.Content[0], w, "prices", "missing: the price of each model, {gpt-4o: {input: 2.50, output: 10}}")
		} else {
			ps = sub.prices(f["prices"], f["default_price"], w)
		}
	} else if ok {
		sub.FailAt(0, w, "", "the file is empty; it needs prices")
	}
	l.Errs = append(l.Errs, sub.Errs...)
	return ps
}

// readBounded reads a file of at most maxFileSize bytes.
func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err == nil && len(data) > maxFileSize {
		err = fmt.Errorf("%s: larger than %d bytes", name, maxFileSize)
	}
	return data, err
}
