package qemuvm

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/link/ringproto"
	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser/vhostusertest"
	"github.com/guestlink/guestlink/plugins/shared/vsockdev"
)

func TestResolveLink(t *testing.T) {
	tests := []struct {
		name       string
		link       sdk.LinkKind
		vsock      string
		vhost      bool
		wantLink   sdk.LinkKind
		wantDevice string
		wantErr    bool
	}{
		{"defaults without vhost-vsock", "", "", false, sdk.LinkSerial, "", false},
		{"defaults with vhost-vsock", "", "", true, sdk.LinkVsock, VsockKernel, false},
		{"vsock=user picks the vsock link", "", VsockUser, false, sdk.LinkVsock, VsockUser, false},
		{"vsock=user beats vhost-vsock", "", VsockUser, true, sdk.LinkVsock, VsockUser, false},
		{"link=vsock, auto device, no vhost-vsock", sdk.LinkVsock, "", false, sdk.LinkVsock, VsockUser, false},
		{"link=vsock, auto device, vhost-vsock", sdk.LinkVsock, VsockAuto, true, sdk.LinkVsock, VsockKernel, false},
		{"vsock=kernel without the device", sdk.LinkVsock, VsockKernel, false, "", "", true},
		{"link=auto, vsock=kernel without the device", "", VsockKernel, false, "", "", true},
		{"vsock=off", "", VsockOff, true, sdk.LinkSerial, "", false},
		{"link=vsock, vsock=off", sdk.LinkVsock, VsockOff, true, "", "", true},
		{"link=serial, vsock=user", sdk.LinkSerial, VsockUser, false, sdk.LinkSerial, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			link, dev, err := resolveLink(&Config{Link: tt.link, Vsock: tt.vsock}, tt.vhost)
			if tt.wantErr {
				if !errors.Is(err, sdk.ErrInvalid) {
					t.Fatalf("resolveLink = %q, %q, %v; want ErrInvalid", link, dev, err)
				}
				return
			}
			if err != nil || link != tt.wantLink || dev != tt.wantDevice {
				t.Fatalf("resolveLink = %q, %q, %v; want %q, %q", link, dev, err, tt.wantLink, tt.wantDevice)
			}
		})
	}
	if _, err := ParseConfig(map[string]string{KeyKernel: "/k", KeyVsock: "vhost"}, Defaults{}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("qemu.vsock=vhost accepted: %v", err)
	}
}

// TestUserVsockLinkToAgent boots the busybox guest with qemu.vsock=user on
// both layouts: the agent listens on AF_VSOCK port 8443 inside, and the
// host reaches it through the device's hybrid socket (the link endpoint)
// with TLS, as the daemon does. The device runs as its own process and
// ends with QEMU.
func TestUserVsockLinkToAgent(t *testing.T) {
	for _, l := range []Layout{LayoutCurrent, LayoutLegacy} {
		t.Run(string(l), func(t *testing.T) {
			e := newBootEnv(t, l, "")
			if !e.img.HasAgent {
				testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
			}
			e.spec.Config[KeyVsock] = VsockUser
			st := e.start(t, false)
			if st.Details["link"] != string(sdk.LinkVsock) || st.Details["vsock"] != VsockUser {
				t.Fatalf("state details %v, want link vsock through the user device", st.Details)
			}
			e.waitWord(t, ringproto.Started, 3*time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			agentThroughDevice(ctx, t, e)
			h, _ := decodeHandle(e.h)
			if _, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			// The device process saw the agent's connection and ended with QEMU.
			log := filepath.Join(h.Dir, vsockLog)
			if !testwait.Until(time.Minute, func() bool {
				b, _ := os.ReadFile(log)
				return strings.Contains(string(b), "QEMU closed its socket")
			}) {
				b, _ := os.ReadFile(log)
				t.Fatalf("the vsock device did not end with QEMU; its log:\n%s", b)
			}
			if b, _ := os.ReadFile(log); strings.Contains(string(b), "; 0 connections") {
				t.Fatalf("the device carried no connection:\n%s", b)
			}
		})
	}
}

// agentThroughDevice does GET /1.0 on the agent's AF_VSOCK port 8443
// through the vsock device's hybrid socket (the link endpoint).
func agentThroughDevice(ctx context.Context, t *testing.T, e *bootEnv) {
	t.Helper()
	ep, err := e.b.LinkEndpoint(ctx, e.h)
	if err != nil || ep.Kind != sdk.LinkVsock || ep.Path == "" || ep.CID < MinGuestCID {
		t.Fatalf("LinkEndpoint = %+v, %v; want vsock with the device's socket", ep, err)
	}
	pair := agentPair(t, e)
	var lastErr error
	for attempt := range 3 { // see getAgentInfo: TCG may miss the agent's 10 s handshake bound
		conn, err := hybrid.Dial(ctx, ep.Path, 8443)
		if err != nil {
			lastErr = err
		} else if lastErr = agentInfoOver(ctx, conn, pair); lastErr == nil {
			return
		}
		t.Logf("attempt %d: %v", attempt, lastErr)
	}
	t.Fatalf("GET /1.0 on the agent through the vsock device: %v", lastErr)
}

// TestUserVsockStatefulRefused: QEMU cannot migrate a vhost-user-vsock
// device, so a stateful stop of a guest with qemu.vsock=user is refused
// up front with ErrNotSupported, and the guest keeps running with its
// link working.
func TestUserVsockStatefulRefused(t *testing.T) {
	e := newBootEnv(t, LayoutCurrent, "")
	if !e.img.HasAgent {
		testenv.Requires(t, "the guest image with the agent", "cmd/guestlink-agent was missing when make guest-image ran: run make build guest-image")
	}
	e.spec.Config[KeyVsock] = VsockUser
	e.start(t, false)
	e.waitWord(t, ringproto.Started, 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := e.b.Stop(ctx, e.h, sdk.StopOptions{Stateful: true})
	if !errors.Is(err, sdk.ErrNotSupported) || !strings.Contains(fmt.Sprint(err), KeyVsock+"=kernel") {
		t.Fatalf("stateful Stop = %+v, %v; want ErrNotSupported naming %s=kernel", st, err, KeyVsock)
	}
	agentThroughDevice(ctx, t, e)
}

// agentPair returns the key pair of the test's config drive (agent and
// daemon client certificate at once).
func agentPair(t *testing.T, e *bootEnv) tls.Certificate {
	t.Helper()
	files := map[string][]byte{}
	for _, f := range e.spec.Files {
		files[f.Path] = f.Data
	}
	pair, err := tls.X509KeyPair(files["agent.crt"], files["agent.key"])
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// TestRunVsockdTransportReset runs the device process's code on sockets
// passed as files, as startVsockd does, with a test front-end in place of
// QEMU: a restored guest gets TRANSPORT_RESET on its event queue, and the
// device returns (logging its counters) when the front-end hangs up.
func TestRunVsockdTransportReset(t *testing.T) {
	dir := shortTempDir(t)
	var files []*os.File
	for _, name := range []string{vsockVhostSocket, vsockSocket} {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		f, err := ln.File()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var log strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- runVsockd([]string{"--cid", "9", "--uds", filepath.Join(dir, vsockSocket), "--transport-reset"}, files[0], files[1], &log)
	}()
	c, err := net.Dial("unix", filepath.Join(dir, vsockVhostSocket))
	if err != nil {
		t.Fatal(err)
	}
	f := vhostusertest.New(t, c.(*net.UnixConn), 3)
	cfg, err := f.Setup(vhostuser.FeatureVersion1, 8)
	if err != nil {
		t.Fatalf("vhost-user setup: %v", err)
	}
	if cid := binary.LittleEndian.Uint64(cfg); cid != 9 {
		t.Fatalf("config CID %d, want 9", cid)
	}
	ev := f.Queues[2]
	ev.OfferWritable(4)
	if !ev.WaitCall(30 * time.Second) {
		t.Fatal("no event within 30s")
	}
	if _, b, ok := ev.TakeUsed(); !ok || len(b) != 4 || binary.LittleEndian.Uint32(b) != vsockdev.EventTransportReset {
		t.Fatalf("event %x (%v), want TRANSPORT_RESET", b, ok)
	}
	f.Close()
	if err := <-done; err != nil {
		t.Fatalf("runVsockd: %v", err)
	}
	if !strings.Contains(log.String(), "QEMU closed its socket") {
		t.Fatalf("log %q", log.String())
	}
}
