// Package sluiceotel records sluice's decisions in OpenTelemetry traces,
// for services that use httplimit or grpclimit. An Observer is fed by the
// middleware's Observe hook: each decision becomes an event named
// "sluice.decision" on the request's span, with its attributes:
//
//	sluice.limit          the limit that decided (a name from configuration)
//	sluice.outcome        admitted, delayed, refused, shadow_admitted,
//	                      shadow_refused, admitted_uncounted, failed or
//	                      invalid
//	sluice.degraded       true when made without the configured store
//	sluice.quota          the limit's capacity (Decision.Limit)
//	sluice.remaining      what is left of it after this request
//	sluice.retry_after_ms for a refusal, when the request would be admitted
//	sluice.delay_ms       for a delayed request, its shaping delay
//	sluice.key            every part of the key, masked (decide.StoreKeyText):
//	                      keys hold what clients send; a value's mask is the
//	                      one sluice's logs and status page show
//	sluice.error          the error of a failed, admitted_uncounted or
//	                      invalid request
//
// The enforced decision also sets sluice.outcome and sluice.limit on the
// span itself, so that traces can be searched by them. Requests outside a
// recording span are left alone, unless Config.Tracer is set: then each
// decision is recorded as a span of its own.
//
// Using it is optional: sluice itself never imports OpenTelemetry.
package sluiceotel

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/decide"
)

// Config configures an Observer. The zero value is ready to use.
type Config struct {
	// Tracer, if set, records each decision made outside a recording span
	// as a span of its own, named "sluice.decision". Default nil: such
	// decisions are not recorded.
	Tracer trace.Tracer
}

// Observer records decisions in traces. It is safe for concurrent use.
type Observer struct {
	cfg Config
}

// New returns an Observer for cfg.
func New(cfg Config) *Observer { return &Observer{cfg: cfg} }

// Observe records one observation of the middleware on ctx's span.
func (ob *Observer) Observe(ctx context.Context, o decide.Observation) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		if ob.cfg.Tracer == nil {
			return
		}
		_, span = ob.cfg.Tracer.Start(ctx, "sluice.decision", trace.WithSpanKind(trace.SpanKindInternal))
		defer span.End()
	}
	attrs := Attributes(o)
	span.AddEvent("sluice.decision", trace.WithAttributes(attrs...))
	switch o.Outcome {
	case decide.ShadowAdmitted, decide.ShadowRefused:
	default: // the request's own outcome
		span.SetAttributes(attrs[:2]...)
	}
}

// ObserveHTTP is Observe as httplimit.Config.Observe takes it.
func (ob *Observer) ObserveHTTP(r *http.Request, o decide.Observation) { ob.Observe(r.Context(), o) }

// ObserveGRPC is Observe as grpclimit.Config.Observe takes it.
func (ob *Observer) ObserveGRPC(ctx context.Context, _ string, o decide.Observation) {
	ob.Observe(ctx, o)
}

// Attributes returns the attributes of an observation, sluice.limit and
// sluice.outcome first.
func Attributes(o decide.Observation) []attribute.KeyValue {
	d := o.Decision
	attrs := []attribute.KeyValue{
		attribute.String("sluice.limit", o.Limit),
		attribute.String("sluice.outcome", o.Outcome.String()),
		attribute.Bool("sluice.degraded", d.Degraded || o.Outcome == decide.AdmittedUncounted),
	}
	if d.Limit > 0 {
		attrs = append(attrs, attribute.Int64("sluice.quota", d.Limit), attribute.Int64("sluice.remaining", d.Remaining))
	}
	if d.RetryAfter > 0 {
		attrs = append(attrs, attribute.Int64("sluice.retry_after_ms", d.RetryAfter.Milliseconds()))
	}
	if d.Delay > 0 {
		attrs = append(attrs, attribute.Int64("sluice.delay_ms", d.Delay.Milliseconds()))
	}
	if o.Key != "" {
		attrs = append(attrs, attribute.String("sluice.key", decide.StoreKeyText(o.Key, 0, false)))
	}
	if o.Err != nil {
		attrs = append(attrs, attribute.String("sluice.error", o.Err.Error()))
	}
	return attrs
}
