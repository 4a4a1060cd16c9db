package linkhost

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/sdnotify"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// notifyRecorder is a NotifyHandler that keeps what it is told.
type notifyRecorder struct {
	mu   sync.Mutex
	got  []notified
	seen chan struct{} // one send per notification
}

type notified struct {
	id Identity
	m  sdnotify.Message
}

func newNotifyRecorder() *notifyRecorder { return &notifyRecorder{seen: make(chan struct{}, 1024)} }

func (r *notifyRecorder) Notify(id Identity, m sdnotify.Message) {
	r.mu.Lock()
	r.got = append(r.got, notified{id, m})
	r.mu.Unlock()
	r.seen <- struct{}{}
}

func (r *notifyRecorder) all() []notified {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notified(nil), r.got...)
}

// sendNotification plays a guest's systemd on a user-space vsock device:
// it connects to the device's notification socket, writes msg, shuts its
// side down and waits for the host to close, as sd_notify does over a
// stream. It returns what the host sent back (nothing is expected).
func sendNotification(t *testing.T, path, msg string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connecting to the notification socket: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "" // the host may close an unwanted connection first
	}
	_ = c.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("waiting for the host to close: %v", err)
	}
	return string(b)
}

// waitNotified waits until r was told n notifications in all.
func waitNotified(t *testing.T, r *notifyRecorder, n int) {
	t.Helper()
	for len(r.all()) < n {
		select {
		case <-r.seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d notifications, want %d", len(r.all()), n)
		}
	}
}

// TestNotifyIdentityFromSocket attaches two instances with user-space vsock
// devices and sends READY=1 on each one's notification socket, the second
// with a message that names the first (a guest lying about who it is):
// each message is tied to the instance whose socket carried it. A garbage
// message, an over-long one and an HTTP request reach no handler, and the
// host keeps serving the socket after them. A hybrid (not vsock) link gets
// no notification socket, and Detach removes the socket.
func TestNotifyIdentityFromSocket(t *testing.T) {
	rec := newNotifyRecorder()
	h := newHost(t, Config{Notify: rec})
	dir := t.TempDir()
	epA := &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 3, Path: filepath.Join(dir, "a", "vsock.sock")}
	epB := &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 3, Path: filepath.Join(dir, "b", "vsock.sock")}
	epH := &sdk.LinkEndpoint{Kind: sdk.LinkHybrid, Path: filepath.Join(dir, "h", "link.sock")}
	for _, d := range []string{"a", "b", "h"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for uuid, ep := range map[string]*sdk.LinkEndpoint{"uuid-a": epA, "uuid-b": epB, "uuid-h": epH} {
		if err := h.Attach(uuid, ep); err != nil {
			t.Fatal(err)
		}
	}
	sockA, sockB := hybrid.HostPath(epA.Path, sdnotify.Port), hybrid.HostPath(epB.Path, sdnotify.Port)
	if fi, err := os.Stat(sockA); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("notification socket of a: %v, %v; want one of mode 0600", fi, err)
	}
	if _, err := os.Stat(hybrid.HostPath(epH.Path, sdnotify.Port)); !os.IsNotExist(err) {
		t.Fatalf("a hybrid link has a notification socket: %v", err)
	}

	// Garbage first: none of it reaches the handler.
	for _, garbage := range []string{
		"\x00\x01\x02garbage",
		"GET / HTTP/1.1\r\nHost: guest\r\n\r\n",
		"READY=1\nSTATUS=" + strings.Repeat("x", sdnotify.MaxMessage), // READY=1 inside an over-long message
		"",
	} {
		if back := sendNotification(t, sockA, garbage); back != "" {
			t.Fatalf("the host answered %q", back)
		}
	}
	sendNotification(t, sockA, "X_SYSTEMD_UNIT_ACTIVE=multi-user.target\nREADY=1\n")
	sendNotification(t, sockB, "READY=1\nX_GUESTLINK_INSTANCE=uuid-a\n")
	waitNotified(t, rec, 2)
	got := rec.all()
	byUUID := map[string]sdnotify.Message{}
	for _, n := range got {
		if n.id.Link != sdk.LinkVsock {
			t.Errorf("notification of %s came on link %q, want vsock", n.id.InstanceUUID, n.id.Link)
		}
		byUUID[n.id.InstanceUUID] = n.m
	}
	if len(got) != 2 || !byUUID["uuid-a"].Ready() || !byUUID["uuid-b"].Ready() {
		t.Fatalf("notifications %+v, want READY=1 once from uuid-a and once from uuid-b (garbage dropped)", got)
	}

	h.Detach("uuid-a")
	if _, err := os.Stat(sockA); !os.IsNotExist(err) {
		t.Fatalf("notification socket left after Detach: %v", err)
	}
	h.Detach("uuid-b")
}

// TestNotifyFlood holds maxNotifyConns connections open without a message:
// the next one is closed at once, unread, and the held ones are read again
// as soon as one of them ends. Then it sends a burst of READY=1 well past
// the instance's budget: no more than the budget (and what refilled
// meanwhile) reaches the handler, the rest is closed unread.
func TestNotifyFlood(t *testing.T) {
	rec := newNotifyRecorder()
	h := newHost(t, Config{Notify: rec})
	ep := &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 3, Path: filepath.Join(t.TempDir(), "vsock.sock")}
	if err := h.Attach("uuid-f", ep); err != nil {
		t.Fatal(err)
	}
	sock := hybrid.HostPath(ep.Path, sdnotify.Port)

	var held []net.Conn
	for range maxNotifyConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The held connections are accepted one after the other; the one
	// past them finds the instance's connections taken and is closed.
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("connection past %d held ones: %v, want it closed by the host", maxNotifyConns, err)
	}
	// A held one finishes its message: it is read.
	io.WriteString(held[0], "READY=1")
	held[0].(*net.UnixConn).CloseWrite()
	waitNotified(t, rec, 1)
	for _, c := range held {
		c.Close()
	}

	start := time.Now()
	const tries = 3 * notifyBurst
	for range tries {
		sendNotification(t, sock, "READY=1")
	}
	// Every message read is handed on before its connection is closed,
	// and sendNotification waited for each close.
	elapsed := time.Since(start)
	// The held connections took maxNotifyConns of the budget and gave one
	// notification; the burst gets the rest and what refilled meanwhile.
	n := len(rec.all())
	least := 1 + notifyBurst - maxNotifyConns
	most := least + int(float64(notifyRate)*elapsed.Seconds()) + 1
	if n < least || n > most {
		t.Fatalf("%d of %d notifications handled in %s, want between %d and %d", n, tries+1, elapsed, least, most)
	}
}

// TestReadNotificationTimeout runs readNotification on a fake clock: a
// guest that writes READY=1 but never ends its message gets nothing read
// (the deadline passes), and one that ends it gets it parsed.
func TestReadNotificationTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host, guest := net.Pipe()
		defer guest.Close()
		defer host.Close()
		go io.WriteString(guest, "READY=1\n")
		start := time.Now()
		_, err := readNotification(host, start.Add(notifyReadTimeout))
		if err == nil || !strings.Contains(err.Error(), "no end within") {
			t.Fatalf("a message without an end: %v, want the deadline's error", err)
		}
		if d := time.Since(start); d != notifyReadTimeout {
			t.Fatalf("gave up after %s, want %s", d, notifyReadTimeout)
		}

		host2, guest2 := net.Pipe()
		defer host2.Close()
		go func() { io.WriteString(guest2, "READY=1\n"); guest2.Close() }()
		m, err := readNotification(host2, time.Now().Add(notifyReadTimeout))
		if err != nil || !m.Ready() {
			t.Fatalf("a whole message: %+v, %v", m, err)
		}
	})
}

// TestNotifyVsockByPeerCID plays the kernel's vsock: the host's
// notification port is listened on through Config.ListenVsock, a
// connection from an attached CID is tied to its instance, one from an
// unknown CID is closed unread.
func TestNotifyVsockByPeerCID(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "vhost-vsock")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link, notify := newChanListener(), newChanListener()
	var mu sync.Mutex
	var ports []uint32
	rec := newNotifyRecorder()
	h := newHost(t, Config{
		VsockDevice: dev,
		Notify:      rec,
		ListenVsock: func(port uint32) (net.Listener, error) {
			mu.Lock()
			defer mu.Unlock()
			ports = append(ports, port)
			if port == sdnotify.Port {
				return notify, nil
			}
			return link, nil
		},
		DialVsock: func(context.Context, uint32, uint32) (net.Conn, error) { return nil, errors.New("no dial here") },
	})
	mu.Lock()
	if len(ports) != 2 || ports[1] != sdnotify.Port || ports[0] == sdnotify.Port {
		t.Fatalf("listened on %v, want the link port then %d", ports, sdnotify.Port)
	}
	mu.Unlock()
	if err := h.Attach("uuid-7", &sdk.LinkEndpoint{Kind: sdk.LinkVsock, CID: 7}); err != nil {
		t.Fatal(err)
	}

	unknownHost, unknownGuest := net.Pipe()
	defer unknownGuest.Close()
	notify.ch <- cidConn{unknownHost, 9}
	go unknownGuest.Write([]byte("READY=1"))
	if _, err := unknownGuest.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("unknown CID: %v, want the connection closed", err)
	}

	knownHost, knownGuest := net.Pipe()
	notify.ch <- cidConn{knownHost, 7}
	io.WriteString(knownGuest, "READY=1\n")
	knownGuest.Close()
	waitNotified(t, rec, 1)
	got := rec.all()
	if want := (Identity{InstanceUUID: "uuid-7", Link: sdk.LinkVsock}); len(got) != 1 || got[0].id != want || !got[0].m.Ready() {
		t.Fatalf("notifications %+v, want READY=1 from %+v", got, want)
	}
}

// TestRandomPortSkipsNotify checks that the link port is never the
// notification port (their hybrid sockets would be one file).
func TestRandomPortSkipsNotify(t *testing.T) {
	for range 200000 {
		if p := randomPort(); p == sdnotify.Port || p < MinPort || p > MaxPort {
			t.Fatalf("randomPort picked %d", p)
		}
	}
}
