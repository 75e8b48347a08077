package leadership

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. Every metric carries the labels "name" (the flag) and
// "process" (the holder name of this process), so several flags and
// processes can share a registry and a dashboard. The alerting rules in
// monitoring/prometheus/rules.yml are written against these names.
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
	// MetricLease is a gauge: the flag's lease in seconds, constant while
	// the flag is open.
	MetricLease = "leadership_flag_lease_seconds"
	// MetricRenewInterval is a gauge: the flag's renew interval in
	// seconds, constant while the flag is open.
	MetricRenewInterval = "leadership_flag_renew_interval_seconds"
	// MetricToken is a gauge: the fencing token of the term while the flag
	// is raised, 0 once it is lowered; it changes when MetricState does.
	MetricToken = "leadership_flag_token"
	// MetricHealthy is a gauge computed when scraped: 1 when [Flag.Check]
	// returns nil, 0 when it reports overdue renewals or a stalled loop.
	MetricHealthy = "leadership_flag_healthy"
)

// metrics holds the collectors of one flag; a nil *metrics records nothing.
type metrics struct {
	state       prometheus.Gauge
	token       prometheus.Gauge
	lease       prometheus.Gauge
	renew       prometheus.Gauge
	transitions *prometheus.CounterVec
	attempts    prometheus.ObserverVec
	errors      *prometheus.CounterVec
	health      *healthCollector
	key         flagKey
	unregister  func()
}

// flagKey is the label values of one flag's series.
type flagKey struct{ name, process string }

// newMetrics registers (or reuses, when another flag registered them
// first) the collectors on reg and curries them with this flag's labels.
func newMetrics(reg prometheus.Registerer, name, process string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := []string{"name", "process"}
	gauge := func(name, help string) (*prometheus.GaugeVec, error) {
		return register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
	}
	state, err := gauge(MetricState, "1 while this process holds the leadership flag and trusts it, else 0.")
	if err != nil {
		return nil, err
	}
	token, err := gauge(MetricToken, "Fencing token of the term while the flag is raised, else 0.")
	if err != nil {
		return nil, err
	}
	lease, err := gauge(MetricLease, "Lease of the flag in seconds.")
	if err != nil {
		return nil, err
	}
	renew, err := gauge(MetricRenewInterval, "How often the holder renews the flag, in seconds.")
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
	health, err := register(reg, newHealthCollector())
	if err != nil {
		return nil, err
	}
	l := prometheus.Labels{"name": name, "process": process}
	m := &metrics{
		state:       state.With(l),
		token:       token.With(l),
		lease:       lease.With(l),
		renew:       renew.With(l),
		transitions: transitions.MustCurryWith(l),
		attempts:    attempts.MustCurryWith(l),
		errors:      errs.MustCurryWith(l),
		health:      health,
		key:         flagKey{name, process},
	}
	m.state.Set(0)
	m.token.Set(0)
	m.unregister = func() {
		for _, g := range []*prometheus.GaugeVec{state, token, lease, renew} {
			g.Delete(l)
		}
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

// watch publishes f's settings and reports its [Flag.Check] as
// MetricHealthy until close.
func (m *metrics) watch(f *Flag) {
	if m == nil {
		return
	}
	m.lease.Set(f.c.lease.Seconds())
	m.renew.Set(f.c.renewInterval.Seconds())
	m.health.add(m.key, f)
}

// setState records a raise (with the term's fencing token) or a lower.
func (m *metrics) setState(raised bool, token int64) {
	if m == nil {
		return
	}
	to := "lowered"
	if raised {
		m.state.Set(1)
		to = "raised"
	} else {
		m.state.Set(0)
		token = 0
	}
	m.token.Set(float64(token))
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
		m.health.remove(m.key)
	}
}

// healthCollector reports MetricHealthy for every watched flag of one
// registry, calling [Flag.Check] at each scrape so the value is as fresh
// as a liveness probe's.
type healthCollector struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	flags map[flagKey][]*Flag // several when twins share name and process
}

func newHealthCollector() *healthCollector {
	return &healthCollector{
		desc: prometheus.NewDesc(MetricHealthy,
			"1 when Flag.Check passes at scrape time, 0 when renewals are overdue or the loop is stalled.",
			[]string{"name", "process"}, nil),
		flags: map[flagKey][]*Flag{},
	}
}

func (c *healthCollector) add(k flagKey, f *Flag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flags[k] = append(c.flags[k], f)
}

// remove forgets the flags of k that are closed.
func (c *healthCollector) remove(k flagKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var open []*Flag
	for _, f := range c.flags[k] {
		if !errors.Is(f.Check(), ErrClosed) {
			open = append(open, f)
		}
	}
	if len(open) == 0 {
		delete(c.flags, k)
	} else {
		c.flags[k] = open
	}
}

// Describe implements [prometheus.Collector].
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements [prometheus.Collector]: 1 for a name and process
// whose flags all pass Check.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, flags := range c.flags {
		healthy := 1.0
		for _, f := range flags {
			if f.Check() != nil {
				healthy = 0
			}
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, healthy, k.name, k.process)
	}
}
