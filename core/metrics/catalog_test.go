package metrics

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// exercise gives every labelled metric of m a series.
func exercise(m *Metrics) {
	m.ObserveRequest("/1.0", "PATCH", 200, time.Millisecond)
	m.RingRead("sim", 10, 1)
	m.RingDropped("sim", 4096)
	m.LinkConn("vsock", true)
	m.startToAgentStarted.WithLabelValues("sim").Observe(1)
	m.startToAgentConnected.WithLabelValues("sim").Observe(1)
	m.startToReady.WithLabelValues("sim").Observe(1)
	m.agentLost.WithLabelValues("sim").Inc()
	m.readyFlaps.WithLabelValues("sim").Inc()
	m.instanceErrors.WithLabelValues("sim").Inc()
}

// typeName is the exposition type name of a metric family.
func typeName(t dto.MetricType) string {
	return strings.ToLower(t.String())
}

// TestCatalogMatchesRegistry checks that the registry exports exactly the
// catalog's guestlink metrics, each with the catalog's type and labels,
// and the Go runtime and process collectors' metrics.
func TestCatalogMatchesRegistry(t *testing.T) {
	e := newEnv(t, fakePlugins{{Name: "sim", Healthy: true}}, epoch)
	e.insts.set(running("a", "sim", 0, "Running", 103, ""))
	exercise(e.m)
	mfs, err := e.m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for _, info := range Catalog {
		mf := got[info.Name]
		if mf == nil {
			t.Errorf("%s is in the catalog but not exported", info.Name)
			continue
		}
		if typeName(mf.GetType()) != info.Type {
			t.Errorf("%s is a %s, the catalog says %s", info.Name, typeName(mf.GetType()), info.Type)
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			want := slices.Sorted(slices.Values(info.Labels))
			if !slices.Equal(labels, want) {
				t.Errorf("%s has labels %q, the catalog says %q", info.Name, labels, want)
			}
		}
		delete(got, info.Name)
	}
	for name := range got {
		if strings.HasPrefix(name, "guestlink_") {
			t.Errorf("%s is exported but not in the catalog", name)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"} {
		if got[name] == nil {
			t.Errorf("%s missing: the Go runtime and process collectors must be registered", name)
		}
	}
}

// TestCatalogNames checks the naming rules of the catalog: the guestlink_
// prefix, _total on counters only, base units, no instance label.
func TestCatalogNames(t *testing.T) {
	seen := map[string]bool{}
	for _, info := range Catalog {
		t.Run(info.Name, func(t *testing.T) {
			if seen[info.Name] {
				t.Fatal("listed twice")
			}
			seen[info.Name] = true
			if !strings.HasPrefix(info.Name, "guestlink_") {
				t.Error("no guestlink_ prefix")
			}
			if (info.Type == Counter) != strings.HasSuffix(info.Name, "_total") {
				t.Error("counters, and only counters, end in _total")
			}
			for _, bad := range []string{"_ms", "_milliseconds", "_kb", "_kib", "_mib"} {
				if strings.Contains(info.Name, bad) {
					t.Errorf("unit %s: use seconds and bytes", bad)
				}
			}
			if slices.Contains(info.Labels, "instance") || slices.Contains(info.Labels, "name") || slices.Contains(info.Labels, "uuid") {
				t.Error("a label naming instances grows without bound")
			}
			if info.Help == "" {
				t.Error("no help")
			}
		})
	}
}

// TestObservers checks the devlxd and ring observers' counts.
func TestObservers(t *testing.T) {
	e := newEnv(t, nil, epoch)
	m := e.m
	m.ObserveRequest("/1.0", "PATCH", 200, 2*time.Millisecond)
	m.ObserveRequest("/1.0", "PATCH", 200, time.Millisecond)
	m.ObserveRequest("none", "GET", 401, 0)
	m.ObserveRequest("/1.0/config/*", "GET", 418, 0)
	m.RingRead("sim", 100, 3)
	m.RingRead("sim", 7, 0)
	m.RingRead("qemu", 1, 1)
	m.RingDropped("qemu", 4096)
	m.LinkConn("hybrid", true)
	m.LinkConn("hybrid", true)
	m.LinkConn("vsock", false)
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"PATCH /1.0 200", testutil.ToFloat64(m.devlxdRequests.WithLabelValues("/1.0", "PATCH", "200")), 2},
		{"GET none 401", testutil.ToFloat64(m.devlxdRequests.WithLabelValues("none", "GET", "401")), 1},
		{"an unusual code", testutil.ToFloat64(m.devlxdRequests.WithLabelValues("/1.0/config/*", "GET", "418")), 1},
		{"sim bytes", testutil.ToFloat64(m.ringBytes.WithLabelValues("sim")), 107},
		{"sim lines", testutil.ToFloat64(m.ringLines.WithLabelValues("sim")), 3},
		{"qemu bytes", testutil.ToFloat64(m.ringBytes.WithLabelValues("qemu")), 1},
		{"qemu drops", testutil.ToFloat64(m.ringDrops.WithLabelValues("qemu")), 1},
		{"qemu dropped bytes", testutil.ToFloat64(m.ringDropBytes.WithLabelValues("qemu")), 4096},
		{"sim drops", testutil.ToFloat64(m.ringDrops.WithLabelValues("sim")), 0},
		{"hybrid accepted", testutil.ToFloat64(m.linkConns.WithLabelValues("hybrid", "accepted")), 2},
		{"vsock refused", testutil.ToFloat64(m.linkConns.WithLabelValues("vsock", "refused")), 1},
		{"vsock accepted", testutil.ToFloat64(m.linkConns.WithLabelValues("vsock", "accepted")), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %g, want %g", tt.name, tt.got, tt.want)
		}
	}
	if n := testutil.CollectAndCount(m.devlxdDuration); n != 3 {
		t.Errorf("%d duration series, want 3 (one per route)", n)
	}
}

// BenchmarkObserveRequest measures the observer alone, as the devlxd
// middleware calls it for every guest request, from parallel goroutines.
func BenchmarkObserveRequest(b *testing.B) {
	m := New(Config{Instances: &fakeInstances{}, Events: noEvents{}, Plugins: fakePlugins(nil)})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveRequest("/1.0", "GET", 200, 150*time.Microsecond)
		}
	})
}
