package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"gateway/internal/llm"
)

// Metrics are the gateway's Prometheus series, registered on a registry the caller owns.
type Metrics struct {
	MessagesIn     *prometheus.CounterVec // by channel
	MessagesOut    *prometheus.CounterVec // answers delivered, by channel
	Rejected       *prometheus.CounterVec // by channel and reason
	TurnSeconds    prometheus.Histogram
	HookErrors     *prometheus.CounterVec // by source and event
	ActiveSessions prometheus.Gauge
	RunningTurns   prometheus.Gauge
	ProviderErrors *prometheus.CounterVec // by provider
	DeliveryErrors *prometheus.CounterVec // by channel
	Tokens         *prometheus.CounterVec // by provider, model and direction (in, out)
	Compactions    *prometheus.CounterVec // by reason (threshold, overflow, manual) and outcome
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		MessagesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_messages_in_total", Help: "Inbound messages taken from chats.",
		}, []string{"channel"}),
		MessagesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_messages_out_total", Help: "Answers delivered to chats.",
		}, []string{"channel"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_messages_rejected_total", Help: "Inbound messages not answered by the model, by reason.",
		}, []string{"channel", "reason"}),
		TurnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_turn_duration_seconds", Help: "Time from a turn's start to its done frame.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120},
		}),
		HookErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_hook_errors_total", Help: "Hook handlers that failed, panicked or timed out.",
		}, []string{"source", "event"}),
		ActiveSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_active_sessions", Help: "Chat sessions held in memory.",
		}),
		RunningTurns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_running_turns", Help: "Turns running now.",
		}),
		ProviderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_errors_total", Help: "Turns that failed at the model provider.",
		}, []string{"provider"}),
		DeliveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_delivery_errors_total", Help: "Frames that could not be delivered to a chat.",
		}, []string{"channel"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_llm_tokens_total", Help: "Tokens the model providers reported, in (prompt) and out (completion), summaries included.",
		}, []string{"provider", "model", "direction"}),
		Compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_compactions_total", Help: "Compactions of long conversations, by reason (threshold, overflow, manual) and outcome (done, cancelled, failed, nothing).",
		}, []string{"reason", "outcome"}),
	}
	reg.MustRegister(m.MessagesIn, m.MessagesOut, m.Rejected, m.TurnSeconds, m.HookErrors,
		m.ActiveSessions, m.RunningTurns, m.ProviderErrors, m.DeliveryErrors, m.Tokens, m.Compactions)
	return m
}

// HookError is the hooks.Options.OnError callback.
func (m *Metrics) HookError(source, event string, _ error) {
	m.HookErrors.WithLabelValues(source, event).Inc()
}

// usage is the harness's OnUsage callback. A nil *Metrics counts nothing.
func (m *Metrics) usage(provider, model string, u llm.Usage) {
	if m == nil {
		return
	}
	if u.InputTokens > 0 {
		m.Tokens.WithLabelValues(provider, model, "in").Add(float64(u.InputTokens))
	}
	if u.OutputTokens > 0 {
		m.Tokens.WithLabelValues(provider, model, "out").Add(float64(u.OutputTokens))
	}
}

// compaction is the harness's OnCompact callback.
func (m *Metrics) compaction(reason, outcome string) {
	if m == nil {
		return
	}
	m.Compactions.WithLabelValues(reason, outcome).Inc()
}
