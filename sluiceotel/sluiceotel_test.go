package sluiceotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/sluiceotel"
)

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// TestObserver: a refusal and a shadow refusal on one span; the span
// carries the request's own outcome, not the shadow one; keys are masked.
func TestObserver(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t")
	ob := sluiceotel.New(sluiceotel.Config{})
	ctx, span := tracer.Start(context.Background(), "req")
	ob.Observe(ctx, decide.Observation{Limit: "per-ip", Key: "6:per-ip11:203.0.113.7", Outcome: decide.Refused,
		Decision: sluice.Decision{Limit: 5, RetryAfter: 1500 * time.Millisecond}})
	ob.Observe(ctx, decide.Observation{Limit: "trial", Outcome: decide.ShadowRefused})
	span.End()
	s := rec.Ended()[0]
	if a := attrs(s.Attributes()); a["sluice.outcome"] != "refused" || a["sluice.limit"] != "per-ip" {
		t.Errorf("span attributes %v, want the refusal's", a)
	}
	if len(s.Events()) != 2 {
		t.Fatalf("%d events, want 2", len(s.Events()))
	}
	e := attrs(s.Events()[0].Attributes)
	if e["sluice.retry_after_ms"] != "1500" || e["sluice.quota"] != "5" || e["sluice.key"] != "part1="+decide.MaskValue("per-ip")+" part2="+decide.MaskValue("203.0.113.7") {
		t.Errorf("event attributes %v", e)
	}
}

// TestObserverOwnSpan: outside a recording span nothing is recorded,
// unless a Tracer is configured; then each decision is a span.
func TestObserverOwnSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t")
	o := decide.Observation{Limit: "per-ip", Outcome: decide.Failed, Err: errors.New("store down")}
	sluiceotel.New(sluiceotel.Config{}).Observe(context.Background(), o)
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans without a Tracer, want 0", n)
	}
	sluiceotel.New(sluiceotel.Config{Tracer: tracer}).Observe(context.Background(), o)
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "sluice.decision" {
		t.Fatalf("spans %v, want one sluice.decision", spans)
	}
	if e := attrs(spans[0].Events()[0].Attributes); e["sluice.error"] != "store down" || e["sluice.outcome"] != "failed" {
		t.Errorf("event attributes %v", e)
	}
}
