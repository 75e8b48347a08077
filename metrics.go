package leadership

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. Every metric carries the labels "name" (the flag) and
// "process" (the holder name of this process), so several flags and
// processes can share a registry and a dashboard.
const (
	// MetricState is a gauge: 1 while the flag is raised, else 0.
	MetricState = "leadership_flag_state"
	// MetricTransitions counts raises and lowers (label "to": raised or
	// lowered).
	MetricTransitions = "leadership_flag_transitions_total"
	// MetricAttemptDuration is a histogram of acquire-or-renew attempts in
	// seconds (label "result": acquired, held_by_other or error).
	MetricAttemptDuration = "leadership_flag_attempt_duration_seconds"
	// MetricErrors counts failed database calls (label "op": acquire or
	// release).
	MetricErrors = "leadership_flag_errors_total"
)

// metrics holds the collectors of one flag; a nil *metrics records nothing.
type metrics struct {
	state       prometheus.Gauge
	transitions *prometheus.CounterVec
	attempts    prometheus.ObserverVec
	errors      *prometheus.CounterVec
	unregister  func()
}

// newMetrics registers (or reuses, when another flag registered them
// first) the collectors on reg and curries them with this flag's labels.
func newMetrics(reg prometheus.Registerer, name, process string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := []string{"name", "process"}
	state, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricState,
		Help: "1 while this process holds the leadership flag and trusts it, else 0.",
	}, labels))
	if err != nil {
		return nil, err
	}
	transitions, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricTransitions,
		Help: "Number of times the flag was raised or lowered in this process.",
	}, append(labels, "to")))
	if err != nil {
		return nil, err
	}
	attempts, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricAttemptDuration,
		Help:    "Duration of acquire-or-renew attempts against the database.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms to 4 s
	}, append(labels, "result")))
	if err != nil {
		return nil, err
	}
	errs, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricErrors,
		Help: "Number of failed database calls of the flag.",
	}, append(labels, "op")))
	if err != nil {
		return nil, err
	}
	l := prometheus.Labels{"name": name, "process": process}
	m := &metrics{
		state:       state.With(l),
		transitions: transitions.MustCurryWith(l),
		attempts:    attempts.MustCurryWith(l),
		errors:      errs.MustCurryWith(l),
	}
	m.state.Set(0)
	m.unregister = func() {
		state.Delete(l)
		transitions.DeletePartialMatch(l)
		attempts.DeletePartialMatch(l)
		errs.DeletePartialMatch(l)
	}
	return m, nil
}

// register registers c, or returns the collector of the same description
// that is already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, fmt.Errorf("leadership: register metrics: %w", err)
}

func (m *metrics) setState(raised bool) {
	if m == nil {
		return
	}
	to := "lowered"
	if raised {
		m.state.Set(1)
		to = "raised"
	} else {
		m.state.Set(0)
	}
	m.transitions.WithLabelValues(to).Inc()
}

func (m *metrics) observeAttempt(result string, seconds float64) {
	if m != nil {
		m.attempts.WithLabelValues(result).Observe(seconds)
	}
}

func (m *metrics) countError(op string) {
	if m != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

func (m *metrics) close() {
	if m != nil {
		m.unregister()
	}
}
