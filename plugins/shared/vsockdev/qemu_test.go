package vsockdev_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"

	"github.com/guestlink/guestlink/internal/testproc"
	"github.com/guestlink/guestlink/internal/testwait"
	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/shared/qemuvm/qemutest"
	"github.com/guestlink/guestlink/plugins/shared/vsockdev"
)

// probeReady replaces the busybox image's /etc/guestlink/ready: it runs
// the probe (testdata/vsockprobe) instead of waiting for an agent.
const probeReady = `#!/bin/sh
echo "vsockprobe: /dev/vsock: $(ls -l /dev/vsock 2>&1)" > /dev/console
/sbin/vsockprobe 2 1234 4321 > /dev/console 2>&1
cat /proc/net/vsock > /dev/console 2>&1
`

// guestInitrd returns the image's initramfs with an archive appended that
// adds the probe and its ready script (the kernel unpacks the archives in
// order, later files replacing earlier ones).
func guestInitrd(t *testing.T, img qemutest.Image, dir string) string {
	t.Helper()
	probe := filepath.Join(dir, "vsockprobe")
	build := exec.Command("go", "build", "-trimpath", "-o", probe, "./testdata/vsockprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the guest probe: %v\n%s", err, out)
	}
	base, err := os.ReadFile(img.Initrd)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.Write(base)
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
	w := cpio.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"sbin/vsockprobe", pb}, {"etc/guestlink/ready", []byte(probeReady)}} {
		if err := w.WriteHeader(&cpio.Header{Name: f.name, Mode: cpio.TypeReg | 0o755, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.img")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQEMUGuestVsock boots the busybox guest under QEMU (TCG) with a
// vhost-user-vsock-pci device served by this package: a guest process
// (the probe) connects over AF_VSOCK to CID 2 port 1234 and its bytes reach
// the host listener "<uds>_1234"; then the host dials the probe's AF_VSOCK
// listener through "CONNECT 4321" (link/hybrid's Dial, as the daemon does)
// and gets an echo.
func TestQEMUGuestVsock(t *testing.T) {
	img := qemutest.RequiresQEMU(t)
	dir := shortDir(t)
	initrd := guestInitrd(t, img, dir)
	const cid = 7
	uds := filepath.Join(dir, "v.sock")
	dev, err := vsockdev.New(vsockdev.Options{CID: cid, UDS: uds})
	if err != nil {
		t.Fatal(err)
	}
	vhostLn, err := net.Listen("unix", filepath.Join(dir, "vu.sock"))
	if err != nil {
		t.Fatal(err)
	}
	hostLn, err := net.Listen("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	guestLn, err := net.Listen("unix", hybrid.HostPath(uds, 1234))
	if err != nil {
		t.Fatal(err)
	}
	defer guestLn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- dev.Run(ctx, vhostLn, hostLn, t.Logf) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	console := filepath.Join(dir, "console.log")
	qemu := exec.Command(img.QEMU,
		"-machine", "q35,accel=tcg", "-m", "256",
		"-object", "memory-backend-memfd,id=mem,size=256M,share=on", "-numa", "node,memdev=mem",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-chardev", "file,id=console,path="+console, "-serial", "chardev:console",
		"-kernel", img.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 guestlink.link=vsock",
		"-chardev", "socket,id=vu,path="+filepath.Join(dir, "vu.sock"),
		"-device", "vhost-user-vsock-pci,chardev=vu",
	)
	qemu.Env = []string{"PATH=/usr/bin:/bin"}
	var qemuErr bytes.Buffer
	qemu.Stderr = &qemuErr
	testproc.Start(t, qemu)
	fail := func(format string, args ...any) {
		t.Helper()
		b, _ := os.ReadFile(console)
		t.Fatalf(format+"\nQEMU stderr: %s\nconsole (tail):\n%s\ndevice: %+v", append(args, qemuErr.String(), tail(string(b), 3000), dev.Stats())...)
	}

	// Guest to host: the probe's connection arrives on <uds>_1234.
	guestLn.(*net.UnixListener).SetDeadline(time.Now().Add(4 * time.Minute))
	c, err := guestLn.Accept()
	if err != nil {
		fail("no guest connection on %s: %v", hybrid.HostPath(uds, 1234), err)
	}
	c.SetDeadline(time.Now().Add(time.Minute))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello from guest\n" {
		fail("host read %q, %v from the guest", line, err)
	}
	io.WriteString(c, "hi guest")
	c.Close()

	// Host to guest: the probe listened before it dialled.
	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	defer dcancel()
	hc, err := hybrid.Dial(dctx, uds, 4321)
	if err != nil {
		fail("hybrid.Dial into the guest's port 4321: %v", err)
	}
	hc.SetDeadline(time.Now().Add(time.Minute))
	io.WriteString(hc, "ping\n")
	echo, err := io.ReadAll(hc)
	hc.Close()
	if err != nil || string(echo) != "echo:ping\n" {
		fail("host read %q, %v from the guest's listener", echo, err)
	}
	st := dev.Stats()
	if st.Connections != 2 || st.BytesFromGuest < uint64(len("hello from guest\necho:ping\n")) {
		fail("device stats %+v, want 2 connections and the probe's bytes", st)
	}
	// The guest saw the host's answer and has its CID from the config space.
	if !testwait.Until(time.Minute, func() bool {
		b, _ := os.ReadFile(console)
		return strings.Contains(string(b), `host answered "hi guest"`)
	}) {
		fail("the probe did not print the host's answer")
	}
	if b, _ := os.ReadFile(console); !strings.Contains(string(b), "local CID 7,") {
		fail("the guest's local CID is not %d", cid)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
