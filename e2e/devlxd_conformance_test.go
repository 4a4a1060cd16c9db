package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/internal/devlxdconf"
)

// TestDevlxdConformance runs the devlxd conformance suite against real
// processes: a daemon, a sim guest running the real agent, once through the
// guest's /dev/lxd/sock (the agent) and once directly on the daemon's devlxd
// over the guest's link with its agent certificate; and the answers to a
// guest with security.devlxd=false on the link (its agent has no socket).
func TestDevlxdConformance(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name, offName = "conf1", "conf-off"
	g := d.launch(ctx, name, devlxdconf.Config(), devlxdconf.Devices())
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	iid := inst.Config["volatile.cloud-init.instance-id"]
	if iid == "" {
		iid = inst.UUID
	}
	conf := devlxdconf.Guest{
		Name: name, InstanceID: iid, Location: host,
		InstanceType: "container", // sim guests are processes
		SetConfig: func(ctx context.Context, key, value string) error {
			_, err := d.client.UpdateConfig(ctx, name, map[string]string{key: value}, nil)
			return err
		},
	}

	t.Run("guest", func(t *testing.T) {
		hc := unixHTTPClient(g.socket)
		defer hc.CloseIdleConnections()
		devlxdconf.Run(t, devlxdconf.Target{
			Form:   devlxdconf.FormGuest,
			Client: hc,
			Dial: func(ctx context.Context) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "unix", g.socket)
			},
		}, conf)
	})
	// The event check set a user key; the link form needs no event.
	conf.SetConfig = nil

	t.Run("link", func(t *testing.T) {
		lc := newLinkClient(t, g, g)
		hc := &http.Client{Transport: &http.Transport{
			DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return lc.dial(ctx) },
		}}
		defer hc.CloseIdleConnections()
		devlxdconf.Run(t, devlxdconf.Target{
			Form:   devlxdconf.FormLink,
			Client: hc,
			Dial:   func(ctx context.Context) (net.Conn, error) { return lc.dial(ctx) },
		}, conf)
	})

	t.Run("disabled", func(t *testing.T) {
		if _, err := d.client.Create(ctx, api.InstancesPost{Name: offName, Backend: "sim", Config: devlxdconf.DisabledConfig(), Start: true}); err != nil {
			t.Fatal(err)
		}
		d.waitInstance(ctx, offName, "agent connected", agentTimeout, func(i *api.Instance) bool {
			return i.Agent.State == api.AgentConnected
		})
		off := d.waitInstance(ctx, offName, "guest dir", agentTimeout, func(i *api.Instance) bool { return i.Details["guest_dir"] != "" })
		og := &guest{name: offName, dir: off.Details["guest_dir"]}
		og.root = og.dir + "/rootfs"
		lc := newLinkClient(t, og, og)
		hc := &http.Client{Transport: &http.Transport{
			DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return lc.dial(ctx) },
		}}
		defer hc.CloseIdleConnections()
		devlxdconf.RunDisabled(t, devlxdconf.Target{Form: devlxdconf.FormLink, Client: hc})
	})
}

// TestDevlxdDaemonOutage kills the daemon while a guest runs: the guest's
// GET /1.0/meta-data answers LXD's agent's 500 (after its retries), and
// succeeds again once the daemon is back.
func TestDevlxdDaemonOutage(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "outage1"
	g := d.launch(ctx, name, map[string]string{"user.meta-data": "zone: a\n"}, nil)
	inst, err := d.client.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := "instance-id: " + inst.UUID + "\nlocal-hostname: " + name + "\nzone: a\n"
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/meta-data", ""); a.status != 200 || string(a.body) != wantMeta {
		t.Fatalf("meta-data before the outage: %d %q", a.status, a.body)
	}

	d.kill()
	start := time.Now()
	a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/meta-data", "")
	if a.status != http.StatusInternalServerError || a.contentType != "text/plain; charset=utf-8" ||
		!strings.HasPrefix(string(a.body), "Failed connecting to devLXD over vsock: ") || !strings.HasSuffix(string(a.body), "\n") {
		t.Fatalf("meta-data with the daemon killed: %d %q %q, want LXD's agent's 500", a.status, a.contentType, a.body)
	}
	t.Logf("500 after %v (10 attempts, 500 ms apart)", time.Since(start).Round(time.Millisecond))

	d.start()
	// The agent reaches the restarted daemon once it is advertised again.
	d.waitInstance(ctx, name, "agent connected again", agentTimeout, func(i *api.Instance) bool {
		return i.Agent.State == api.AgentConnected
	})
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/meta-data", ""); a.status != 200 || string(a.body) != wantMeta {
		t.Fatalf("meta-data after the daemon is back: %d %q, want 200 %q", a.status, a.body, wantMeta)
	}
}

// TestDevlxdCloudInitInstanceID checks that a cloud-init.* change gives the
// guest a new instance-id (so cloud-init applies the new data) and a user.*
// change does not.
func TestDevlxdCloudInitInstanceID(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const name = "iid1"
	g := d.launch(ctx, name, map[string]string{"cloud-init.user-data": "#cloud-config\nhostname: a\n"}, nil)
	iid := func() string {
		t.Helper()
		a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/meta-data", "")
		first, _, _ := strings.Cut(string(a.body), "\n")
		id, ok := strings.CutPrefix(first, "instance-id: ")
		if a.status != 200 || !ok || id == "" {
			t.Fatalf("meta-data: %d %q", a.status, a.body)
		}
		return id
	}
	set := func(key, value string) {
		t.Helper()
		if _, err := d.client.UpdateConfig(ctx, name, map[string]string{key: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	id0 := iid()
	set("user.other", "x")
	if id := iid(); id != id0 {
		t.Fatalf("a user.* change changed the instance-id: %q -> %q", id0, id)
	}
	set("cloud-init.user-data", "#cloud-config\nhostname: b\n")
	id1 := iid()
	if id1 == id0 {
		t.Fatalf("a cloud-init.user-data change kept the instance-id %q", id0)
	}
	set("cloud-init.ssh-keys.me", "root:ssh-ed25519 AAAAexample")
	if id := iid(); id == id1 {
		t.Fatalf("a cloud-init.ssh-keys change kept the instance-id %q", id1)
	}
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/config/cloud-init.user-data", ""); !strings.Contains(string(a.body), "ssh-ed25519 AAAAexample #lxd:cloud-init.ssh-keys") {
		t.Fatalf("user-data after adding a key: %q", a.body)
	}
}
