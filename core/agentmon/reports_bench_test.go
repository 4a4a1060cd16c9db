package agentmon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/instance"
)

// BenchmarkReportRefresh is one refresh of a guest's report as the daemon
// makes it (a TLS connection to the real guestlink-agent over the hybrid
// link, GET /1.0 and GET /1.0/state, decoded): what a list of stale
// reports started up to 8 of at once before lists stopped refreshing.
// The agent is another process, so cpu-us/op is the daemon's side only.
func BenchmarkReportRefresh(b *testing.B) {
	r := startRealAgent(b)
	m := r.d.svc.monitor(r.inst.UUID)
	ctx := context.Background()
	cpu0 := processCPU(b)
	for b.Loop() {
		m.guest.mu.Lock()
		m.guest.at = time.Time{} // stale: Guest fetches
		m.guest.mu.Unlock()
		info, ok := r.d.svc.Guest(ctx, r.inst.UUID, time.Minute)
		if !ok || info.Error != "" || info.State == nil {
			b.Fatalf("report: %+v, %v", info, ok)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// BenchmarkListReports is what a list of 10,000 connected guests asks of
// the agent monitor for its ipv4 column, every report cached: before, a
// copy of each report (CachedGuest) and its address worked out per row
// (GuestState.IPv4 sorts the interface names); now the address worked
// out once per fetch and read without a lock (CachedIPv4). cpu-us/list is
// per list.
func BenchmarkListReports(b *testing.B) {
	const n = 10000
	s, err := New(Config{Instances: &hbInstances{be: hbBackend{}}, Links: deadLinks{}, Certs: testCerts(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		s.mu.Lock()
		clear(s.monitors) // made here, not started: Close would halt them
		s.mu.Unlock()
		s.Close()
	}()
	now := time.Now()
	uuids := make([]string, n)
	for i := range uuids {
		uuids[i] = fmt.Sprint("uuid-", i)
		st := &api.GuestState{Network: map[string]api.GuestNetwork{
			"lo":   {Addresses: []api.GuestAddress{{Family: "inet", Address: "127.0.0.1", Netmask: "8", Scope: "local"}}},
			"eth0": {Addresses: []api.GuestAddress{{Family: "inet", Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+2), Netmask: "24", Scope: "global"}}},
		}}
		m := &monitor{svc: s, uuid: uuids[i], state: instance.AgentConnected}
		m.connectedNow.Store(true)
		m.guest.info = api.GuestInfo{Features: []string{"exec", "files", "state"}, State: st, UpdatedAt: &now}
		m.guest.at, m.guest.ipv4 = now, st.IPv4()
		ip := m.guest.ipv4
		m.guest.listed.Store(&ip)
		s.monitors[uuids[i]] = m
	}
	for _, bc := range []struct {
		name string
		ipv4 func(uuid string) string
	}{
		{"copy-and-derive", func(uuid string) string { // the list's path before
			if info := s.CachedGuest(uuid); info != nil {
				return info.State.IPv4()
			}
			return ""
		}},
		{"cached-ipv4", s.CachedIPv4},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				for _, u := range uuids {
					if bc.ipv4(u) == "" {
						b.Fatal("no address")
					}
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/list")
		})
	}
	b.Run("cached-ipv4s", func(b *testing.B) { // a list's batches of 256 rows (CachedIPv4s)
		b.ReportAllocs()
		dst := make([]string, 256)
		cpu0 := processCPU(b)
		for b.Loop() {
			for i := 0; i < len(uuids); i += 256 {
				part := uuids[i:min(i+256, len(uuids))]
				s.CachedIPv4s(part, dst)
				for _, ip := range dst[:len(part)] {
					if ip == "" {
						b.Fatal("no address")
					}
				}
			}
		}
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/list")
	})
}

// BenchmarkConnectReport is what a connecting guest's advertisement and
// report cost the daemon with the real guestlink-agent over the hybrid
// link (cpu-us/op, the daemon's side: the agent is another process):
//
//   - conns=2: the PUT /1.0 on a connection of its own, then the report
//     (GET /1.0, GET /1.0/state) on another, as the refresher fetched it
//     after the agent's CONNECTED: two TLS handshakes;
//   - conns=1: the report on the PUT's connection once it is answered
//     (monitor.fetchAfterAdvert): one.
func BenchmarkConnectReport(b *testing.B) {
	r := startRealAgent(b)
	m := r.d.svc.monitor(r.inst.UUID)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		same bool
	}{{"conns=2", false}, {"conns=1", true}} {
		b.Run(bc.name, func(b *testing.B) {
			cpu0 := processCPU(b)
			for b.Loop() {
				hc := m.client.sessionClient()
				put := hc
				if !bc.same {
					put = m.client.httpClient()
				}
				if _, err := m.advertise(put); err != nil {
					b.Fatal(err)
				}
				put.CloseIdleConnections()
				info := m.fetchGuest(ctx, hc)
				hc.CloseIdleConnections()
				if info.Error != "" || info.State == nil {
					b.Fatalf("report: %+v", info)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
