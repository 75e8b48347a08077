// Package prometheus holds the Prometheus recording and alerting rules for
// leadership flags (rules.yml: the metrics are in the README, what to do
// when each alert fires in docs/operations.md) and their tests; it has no
// Go API.
//
// The tests run promtool and Prometheus, from the Debian package
// "prometheus": `promtool check rules` and `promtool test rules
// rules_tests.yml` on the rules, `promtool check metrics` on the output of
// real flags, and an end-to-end test in which a Prometheus server started
// by the test scrapes processes of examples/service while the test kills
// and stops their leaders, and then asks Prometheus which alerts fired.
// Without the binaries the tests are skipped, or fail when
// LEADERSHIP_TEST_REQUIRE_DB=1 (as .ci/run sets it).
package prometheus
