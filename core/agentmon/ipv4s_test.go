package agentmon

import (
	"fmt"
	"testing"

	"github.com/guestlink/guestlink/core/instance"
)

// TestCachedIPv4s: the batch lookup a list makes gives, for every uuid,
// what CachedIPv4 gives: the address of a connected agent's report, ""
// for one not connected, one without an address and an unknown uuid;
// over more uuids than one hold of the lock covers, into a dst holding
// stale values.
func TestCachedIPv4s(t *testing.T) {
	s, err := New(Config{Instances: &hbInstances{be: hbBackend{}}, Links: deadLinks{}, Certs: testCerts(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.mu.Lock()
		clear(s.monitors) // made here, not started: nothing of theirs to halt
		s.mu.Unlock()
		s.Close()
	}()
	const n = 700
	var uuids, want []string
	for i := range n {
		u := fmt.Sprint("uuid-", i)
		uuids = append(uuids, u)
		ip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+2)
		switch i % 4 {
		case 0: // connected, with an address
			want = append(want, ip)
		case 1: // connected, no report yet
			want = append(want, "")
			ip = ""
		case 2: // not connected: its last address is not shown
			want = append(want, "")
		case 3: // unknown
			want = append(want, "")
			continue
		}
		m := &monitor{svc: s, uuid: u, state: instance.AgentConnected}
		m.connectedNow.Store(i%4 != 2)
		if ip != "" {
			m.guest.listed.Store(&ip)
		}
		s.monitors[u] = m
	}
	dst := make([]string, n)
	for i := range dst {
		dst[i] = "stale"
	}
	s.CachedIPv4s(uuids, dst)
	for i, u := range uuids {
		if one := s.CachedIPv4(u); dst[i] != want[i] || one != want[i] {
			t.Errorf("%s: CachedIPv4s %q, CachedIPv4 %q, want %q", u, dst[i], one, want[i])
		}
	}
}
