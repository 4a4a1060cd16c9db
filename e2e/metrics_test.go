package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/status"
	"github.com/guestlink/guestlink/internal/testwait"
)

// scrape GETs url/metrics with token ("" for none) and returns the status
// and, for a 200, the parsed metric families.
func scrape(ctx context.Context, t *testing.T, url, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := insecureClient().Do(req)
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the text exposition format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return resp.StatusCode, mfs
}

// series returns the metric of family name whose labels include want, or nil.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetricsEndToEnd runs the real daemon with a sim guest whose agent
// declares Ready, and reads /metrics over HTTP with a bearer token: the
// time-to-ready histogram has a sample for backend sim, the devlxd
// counter has route and code labels, the gauges read the instance; and
// without a token the answer is 401.
func TestMetricsEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := newTCPDaemon(t)

	if code, _ := scrape(ctx, t, d.httpURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token: %d, want 401", code)
	}
	if code, _ := scrape(ctx, t, d.httpsURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics over https without credentials: %d, want 401", code)
	}
	d.cli(ctx, "auth", "identity", "create", "bearer/prometheus")
	token := strings.TrimSpace(d.cli(ctx, "auth", "identity", "token", "issue", "bearer/prometheus"))

	const name = "metrics1"
	g := d.launch(ctx, name, nil, nil)
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })
	// A guest reads a config key: a route with a pattern.
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/config/user.missing", ""); a.status != http.StatusNotFound {
		t.Fatalf("devlxd GET /1.0/config/user.missing: %d %s", a.status, a.body)
	}

	// The guest withdraws Ready and declares it again: one flap, and still
	// one start-to-ready sample (the boot's first Ready).
	agentCommand(ctx, t, g, "started")
	d.waitInstance(ctx, name, "Running", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Running) })
	agentCommand(ctx, t, g, "ready")
	d.waitInstance(ctx, name, "Ready again", opTimeout, func(i *api.Instance) bool { return i.StatusCode == int(status.Ready) })

	// The lifecycle subscriber may lag the status by a moment: wait for
	// the flap, scraping as Prometheus would (events are handled in order,
	// so the Ready before it was too).
	var mfs map[string]*dto.MetricFamily
	sim := map[string]string{"backend": "sim"}
	testwait.For(t, "a Ready flap for backend sim", opTimeout, func() bool {
		var code int
		code, mfs = scrape(ctx, t, d.httpURL, token)
		if code != http.StatusOK {
			t.Fatalf("GET /metrics with a bearer token: %d", code)
		}
		m := series(mfs, "guestlink_ready_flaps_total", sim)
		return m != nil && m.GetCounter().GetValue() >= 1
	})

	tests := []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		check  func(*dto.Metric) error
	}{
		{"guestlink_instance_start_to_ready_seconds", dto.MetricType_HISTOGRAM, sim, histogramExactly(1)},
		{"guestlink_ready_flaps_total", dto.MetricType_COUNTER, sim, counterIs(1)},
		{"guestlink_agent_lost_total", dto.MetricType_COUNTER, sim, nil}, // no series until an agent is lost
		{"guestlink_instance_start_to_agent_connected_seconds", dto.MetricType_HISTOGRAM, sim, histogramSamples(1)},
		{"guestlink_instance_start_to_agent_started_seconds", dto.MetricType_HISTOGRAM, sim, histogramSamples(1)},
		{"guestlink_devlxd_requests_total", dto.MetricType_COUNTER,
			map[string]string{"route": "/1.0", "method": "PATCH", "code": "200"}, counterAtLeast(1)},
		{"guestlink_devlxd_requests_total", dto.MetricType_COUNTER,
			map[string]string{"route": "/1.0/config/*", "method": "GET", "code": "404"}, counterAtLeast(1)},
		{"guestlink_devlxd_request_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"route": "/1.0"}, histogramSamples(1)},
		{"guestlink_instances", dto.MetricType_GAUGE, map[string]string{"backend": "sim", "status": "Ready"}, gaugeIs(1)},
		{"guestlink_instances", dto.MetricType_GAUGE, map[string]string{"backend": "sim", "status": "Running"}, gaugeIs(0)},
		{"guestlink_instance_agents", dto.MetricType_GAUGE, map[string]string{"backend": "sim", "state": "connected"}, gaugeIs(1)},
		{"guestlink_instance_not_ready_max_age_seconds", dto.MetricType_GAUGE, sim, gaugeIs(0)},
		{"guestlink_ring_read_bytes_total", dto.MetricType_COUNTER, sim, counterAtLeast(1)},
		{"guestlink_ring_read_lines_total", dto.MetricType_COUNTER, sim, counterAtLeast(1)},
		{"guestlink_link_connections_total", dto.MetricType_COUNTER, map[string]string{"result": "accepted"}, counterAtLeast(1)},
		{"guestlink_plugin_up", dto.MetricType_GAUGE, map[string]string{"plugin": "sim"}, gaugeIs(1)},
		{"guestlink_plugin_restarts_total", dto.MetricType_COUNTER, map[string]string{"plugin": "sim"}, counterAtLeast(0)},
		{"guestlink_event_subscribers", dto.MetricType_GAUGE, nil, gaugeAtLeast(1)}, // the daemon's own
		{"guestlink_event_subscribers_dropped_total", dto.MetricType_COUNTER, nil, counterAtLeast(0)},
		{"guestlink_dashboard_streams", dto.MetricType_GAUGE, nil, gaugeIs(0)},
		// The default allowance, 64 MiB over 32 KiB a connection.
		{"guestlink_devlxd_kept_connections_budget", dto.MetricType_GAUGE, nil, gaugeIs(2048)},
		{"guestlink_devlxd_kept_connections", dto.MetricType_GAUGE, nil, gaugeAtLeast(0)},
		{"guestlink_devlxd_kept_connections_closed_total", dto.MetricType_COUNTER, nil, counterAtLeast(0)},
		{"guestlink_dashboard_streams_dropped_total", dto.MetricType_COUNTER, nil, counterAtLeast(0)},
		{"guestlink_build_info", dto.MetricType_GAUGE, nil, gaugeIs(1)},
		{"go_goroutines", dto.MetricType_GAUGE, nil, gaugeAtLeast(1)},
		{"process_resident_memory_bytes", dto.MetricType_GAUGE, nil, gaugeAtLeast(1)},
	}
	for _, tt := range tests {
		if tt.check == nil {
			if m := series(mfs, tt.name, tt.labels); m != nil {
				t.Errorf("%s%v: a series %v, want none yet", tt.name, tt.labels, m)
			}
			continue
		}
		mf := mfs[tt.name]
		if mf == nil {
			t.Errorf("%s: not exported", tt.name)
			continue
		}
		if mf.GetType() != tt.typ {
			t.Errorf("%s: type %v, want %v", tt.name, mf.GetType(), tt.typ)
		}
		m := series(mfs, tt.name, tt.labels)
		if m == nil {
			t.Errorf("%s: no series with labels %v", tt.name, tt.labels)
			continue
		}
		if err := tt.check(m); err != nil {
			t.Errorf("%s%v: %v", tt.name, tt.labels, err)
		}
	}
	for family, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), name) {
					t.Errorf("%s has a label naming the instance: %s=%q", family, l.GetName(), l.GetValue())
				}
			}
		}
	}

	// The admin socket serves the same metrics; its mode is the access
	// control.
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", filepath.Join(d.stateDir, "guestlink.sock"))
	}}}
	defer unix.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://guestlink/metrics", nil)
	resp, err := unix.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics on the admin socket: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "# TYPE guestlink_instance_start_to_ready_seconds histogram") {
		t.Fatalf("GET /metrics on the admin socket: %d\n%.300s", resp.StatusCode, body)
	}
}

func histogramSamples(n uint64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		h := m.GetHistogram()
		if h.GetSampleCount() < n {
			return fmt.Errorf("%d samples, want at least %d", h.GetSampleCount(), n)
		}
		if h.GetSampleSum() < 0 || h.GetSampleSum() > time.Hour.Seconds() {
			return fmt.Errorf("samples sum to %gs", h.GetSampleSum())
		}
		return nil
	}
}

func histogramExactly(n uint64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		if got := m.GetHistogram().GetSampleCount(); got != n {
			return fmt.Errorf("%d samples, want %d", got, n)
		}
		return histogramSamples(n)(m)
	}
}

func counterIs(v float64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		if got := m.GetCounter().GetValue(); got != v {
			return fmt.Errorf("%g, want %g", got, v)
		}
		return nil
	}
}

func counterAtLeast(v float64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		if got := m.GetCounter().GetValue(); got < v {
			return fmt.Errorf("%g, want at least %g", got, v)
		}
		return nil
	}
}

func gaugeIs(v float64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		if got := m.GetGauge().GetValue(); got != v {
			return fmt.Errorf("%g, want %g", got, v)
		}
		return nil
	}
}

func gaugeAtLeast(v float64) func(*dto.Metric) error {
	return func(m *dto.Metric) error {
		if got := m.GetGauge().GetValue(); got < v {
			return fmt.Errorf("%g, want at least %g", got, v)
		}
		return nil
	}
}
