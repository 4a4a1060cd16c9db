package agentmon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/advert"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// changes wakes waitFor whenever a fake records something (a ring read or
// write, an agent state, an instance update, a PUT or an event at the fake
// agent), so the tests wait for events rather than poll.
var changes = newBroadcast()

// broadcast is a condition without a lock: next returns a channel that the
// next notify closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// fakeRing is a guest ring buffer: writes append, reads consume.
type fakeRing struct {
	contract.Backend // other methods are not used
	mu               sync.Mutex
	buf              []byte
	reads            int
	times            []time.Time // when each read began
}

func (r *fakeRing) ReadRing(_ context.Context, _ contract.Handle, max int) ([]byte, error) {
	defer changes.notify()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	r.times = append(r.times, time.Now())
	n := min(max, len(r.buf))
	out := append([]byte(nil), r.buf[:n]...)
	r.buf = r.buf[n:]
	return out, nil
}

func (r *fakeRing) write(s string) {
	defer changes.notify()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, s...)
}

func (r *fakeRing) readCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// readTimes returns when each read began.
func (r *fakeRing) readTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.times...)
}

func (r *fakeRing) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buf) == 0
}

type stateCall struct {
	st        instance.AgentState
	heartbeat time.Time
}

// fakeInstances is an in-memory Instances.
type fakeInstances struct {
	mu     sync.Mutex
	insts  map[string]*instance.Instance
	rings  map[string]*fakeRing
	states map[string][]stateCall
	ooms   map[string][]uint64 // ReportOOMCounter's calls
}

func (f *fakeInstances) ReportOOMCounter(_ context.Context, uuid string, counter uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ooms == nil {
		f.ooms = map[string][]uint64{}
	}
	f.ooms[uuid] = append(f.ooms[uuid], counter)
	return nil
}

func (f *fakeInstances) oomCalls(uuid string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ooms[uuid]
}

func (f *fakeInstances) Get(_ context.Context, name string) (*instance.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, inst := range f.insts {
		if inst.Name == name {
			return clone(inst), nil
		}
	}
	return nil, fmt.Errorf("instance %s: %w", name, errdefs.ErrNotFound)
}

func (f *fakeInstances) GetByUUID(_ context.Context, uuid string) (*instance.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inst, ok := f.insts[uuid]
	if !ok {
		return nil, fmt.Errorf("instance %s: %w", uuid, errdefs.ErrNotFound)
	}
	return clone(inst), nil
}

// clone copies an instance as the manager's views are copies.
func clone(inst *instance.Instance) *instance.Instance {
	cp := *inst
	cp.Config = maps.Clone(inst.Config)
	cp.Devices = map[string]map[string]string{}
	for k, d := range inst.Devices {
		cp.Devices[k] = maps.Clone(d)
	}
	return &cp
}

func (f *fakeInstances) SetAgentState(_ context.Context, uuid string, st instance.AgentState, hb time.Time) error {
	defer changes.notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[uuid] = append(f.states[uuid], stateCall{st, hb})
	return nil
}

func (f *fakeInstances) Runtime(_ context.Context, uuid string) (contract.Backend, contract.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rings[uuid]
	if !ok {
		return nil, nil, fmt.Errorf("instance %s: %w", uuid, errdefs.ErrNotFound)
	}
	return r, contract.Handle("h"), nil
}

func (f *fakeInstances) calls(uuid string) []stateCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stateCall(nil), f.states[uuid]...)
}

// lastState is the last state recorded for uuid.
func (f *fakeInstances) lastState(uuid string) instance.AgentState {
	c := f.calls(uuid)
	if len(c) == 0 {
		return instance.AgentNone
	}
	return c[len(c)-1].st
}

func (f *fakeInstances) update(uuid string, fn func(*instance.Instance)) *instance.Instance {
	defer changes.notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.insts[uuid])
	return clone(f.insts[uuid])
}

// fakeAgent is the agent's link listener: TLS with the agent certificate,
// accepting only the daemon's client certificate for this instance.
type fakeAgent struct {
	mu      sync.Mutex
	adverts []*advert.Advertisement
	events  [][]byte
	// stall, when set, holds GET /1.0/state until it is closed;
	// stateGets counts those requests (guest_test.go).
	stall     chan struct{}
	stateGets int
	oomKills  uint64 // the state's oom_kills
	// noAddr, when set, leaves the state without an address (a guest
	// whose network is not up yet); stateTimes are when each GET
	// /1.0/state came (reports_test.go).
	noAddr     bool
	stateTimes []time.Time
	// conns counts the connections the daemon opened to the agent.
	conns int
	// putStall, when set, holds PUT /1.0 until it is closed (the agent
	// slow to validate an advertisement); putsBegun counts the PUTs
	// received, held or not.
	putStall  chan struct{}
	putsBegun int
}

// connCount returns how many connections the daemon opened to the agent.
func (a *fakeAgent) connCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns
}

// gets returns how many GET /1.0/state the agent answered or holds.
func (a *fakeAgent) gets() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateGets
}

func (a *fakeAgent) puts() []*advert.Advertisement {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*advert.Advertisement(nil), a.adverts...)
}

func (a *fakeAgent) eventBodies() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]byte(nil), a.events...)
}

func startFakeAgent(t *testing.T, vmmSock string, certs *pki.InstanceCerts) *fakeAgent {
	t.Helper()
	vmm, err := hybrid.Listen(vmmSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vmm.Close() })
	a := &fakeAgent{}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /1.0", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.putsBegun++
		stall := a.putStall
		a.mu.Unlock()
		changes.notify()
		if stall != nil {
			<-stall
		}
		body, _ := io.ReadAll(r.Body)
		ad, err := advert.Parse(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.adverts = append(a.adverts, ad)
		a.mu.Unlock()
		changes.notify()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"sync","status":"Success","status_code":200,"operation":"","error_code":0,"error":"","metadata":null}`)
	})
	mux.HandleFunc("POST /1.0/events", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.events = append(a.events, body)
		a.mu.Unlock()
		changes.notify()
	})
	mux.HandleFunc("GET /1.0", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"version":"fake","boot_id":"b","state":"CONNECTED","devlxd":false,"features":["files","state"]}}`)
	})
	mux.HandleFunc("GET /1.0/state", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.stateGets++
		a.stateTimes = append(a.stateTimes, time.Now())
		n, stall, ooms, noAddr := a.stateGets, a.stall, a.oomKills, a.noAddr
		a.mu.Unlock()
		changes.notify()
		if stall != nil {
			<-stall
		}
		addrs := `[{"family":"inet","address":"10.0.2.15","netmask":"24","scope":"global"}]`
		if noAddr {
			addrs = `[{"family":"inet6","address":"fe80::1","netmask":"64","scope":"link"}]`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"hostname":"fake-%d","network":{"eth0":{"addresses":%s}},"oom_kills":%d}}`, n, addrs, ooms)
	})
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			a.mu.Lock()
			a.conns++
			a.mu.Unlock()
		}
	}, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{certs.Agent.TLS},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], certs.Client.DER) {
				return errors.New("not the daemon's client certificate")
			}
			return nil
		},
	}}
	ln := vmm.Port(linkhost.AgentPort)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return a
}

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
