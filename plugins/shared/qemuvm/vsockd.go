package qemuvm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser"
	"github.com/guestlink/guestlink/plugins/shared/vsockdev"
)

// Files of the user-space vsock device in the guest directory.
const (
	vsockSocket      = "vsock.sock"    // the hybrid socket (host side); the daemon listens on vsock.sock_<port>
	vsockVhostSocket = "vsock-vu.sock" // QEMU's vhost-user chardev
	vsockLog         = "vsockd.log"
)

// VsockdCommand is the hidden first argument that makes a QEMU plugin
// binary run a guest's vsock device instead of serving the plugin
// protocol (see MaybeRunVsockd).
const VsockdCommand = "__vsockd"

// vsockdConnectTimeout bounds the wait for QEMU to connect to the device.
const vsockdConnectTimeout = 2 * time.Minute

// resolveLink picks the link and the vsock device of a start from
// qemu.link and qemu.vsock: vsock=auto (or unset) is the kernel's
// vhost-vsock when /dev/vhost-vsock exists, else the user-space device;
// link=auto is vsock when a device is configured or the kernel's exists,
// else serial.
func resolveLink(cfg *Config, vhostVsock bool) (sdk.LinkKind, string, error) {
	dev := cfg.Vsock
	if dev == "" || dev == VsockAuto {
		dev = VsockUser
		if vhostVsock {
			dev = VsockKernel
		}
	}
	link := cfg.Link
	if link == "" {
		switch {
		case cfg.Vsock == VsockUser || cfg.Vsock == VsockKernel:
			link = sdk.LinkVsock
		case (cfg.Vsock == "" || cfg.Vsock == VsockAuto) && vhostVsock:
			link = sdk.LinkVsock
		default:
			link = sdk.LinkSerial
		}
	}
	if link != sdk.LinkVsock {
		return link, "", nil
	}
	switch dev {
	case VsockOff:
		return "", "", fmt.Errorf("%w: %s=vsock with %s=off", sdk.ErrInvalid, KeyLink, KeyVsock)
	case VsockKernel:
		if !vhostVsock {
			return "", "", fmt.Errorf("%w: %s=kernel but %s does not exist on this host (use %s=user)", sdk.ErrInvalid, KeyVsock, VhostVsockDevice, KeyVsock)
		}
	}
	return link, dev, nil
}

// startVsockd starts the guest's vsock device as its own process (the
// plugin binary with VsockdCommand), in its own session so that it
// outlives the plugin as QEMU does. Its sockets are bound here and passed
// down, so QEMU can connect as soon as this returns. The caller waits for
// the process (it exits when QEMU closes the vhost-user socket).
//
// restored says that QEMU resumes a saved state: the guest's connections
// in that memory are gone with the old device, so the new one starts with
// a TRANSPORT_RESET event (the guest closes them, keeps its listeners).
func startVsockd(dir string, cid uint32, restored bool) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("starting the vsock device: %w", err)
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, name := range []string{vsockVhostSocket, vsockSocket} {
		p := filepath.Join(dir, name)
		os.Remove(p)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("starting the vsock device: %w", err)
		}
		ln.SetUnlinkOnClose(false)
		f, err := ln.File()
		ln.Close()
		if err != nil {
			return nil, fmt.Errorf("starting the vsock device: %w", err)
		}
		files = append(files, f)
	}
	logf, err := os.OpenFile(filepath.Join(dir, vsockLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting the vsock device: %w", err)
	}
	defer logf.Close()
	args := []string{VsockdCommand, "--cid", fmt.Sprint(cid), "--uds", filepath.Join(dir, vsockSocket)}
	if restored {
		args = append(args, "--transport-reset")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = dir
	cmd.Env = VMMEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = files // fd 3: vhost-user, fd 4: hybrid
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the vsock device: %w", err)
	}
	return cmd, nil
}

// MaybeRunVsockd runs the vsock device and exits when the process was
// started as one (os.Args[1] == VsockdCommand); otherwise it returns. The
// QEMU plugins call it first thing in main.
func MaybeRunVsockd() {
	if len(os.Args) < 2 || os.Args[1] != VsockdCommand {
		return
	}
	if err := runVsockd(os.Args[2:], os.NewFile(3, "vhost-user"), os.NewFile(4, "hybrid"), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vsockd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runVsockd serves one QEMU: it waits for QEMU's vhost-user connection,
// serves it until QEMU closes it, and returns.
func runVsockd(args []string, vhostFile, hostFile *os.File, log io.Writer) error {
	fs := flag.NewFlagSet(VsockdCommand, flag.ContinueOnError)
	cid := fs.Uint64("cid", 0, "guest CID")
	uds := fs.String("uds", "", "hybrid socket path")
	reset := fs.Bool("transport-reset", false, "send TRANSPORT_RESET once the event queue runs (a restored guest)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	vln, err := net.FileListener(vhostFile)
	vhostFile.Close()
	if err != nil {
		return fmt.Errorf("vhost-user socket (fd 3): %w", err)
	}
	defer vln.Close()
	hln, err := net.FileListener(hostFile)
	hostFile.Close()
	if err != nil {
		return fmt.Errorf("hybrid socket (fd 4): %w", err)
	}
	defer hln.Close()
	dev, err := vsockdev.New(vsockdev.Options{CID: *cid, UDS: *uds})
	if err != nil {
		return err
	}
	if *reset {
		dev.TransportReset()
	}
	go dev.ServeHost(hln)
	vln.(*net.UnixListener).SetDeadline(time.Now().Add(vsockdConnectTimeout))
	c, err := vln.Accept()
	if err != nil {
		return fmt.Errorf("waiting for QEMU: %w", err)
	}
	fmt.Fprintf(log, "vsockd: QEMU connected; guest CID %d, host socket %s\n", *cid, *uds)
	err = vhostuser.NewSession(c.(*net.UnixConn), dev).Serve()
	st := dev.Stats()
	fmt.Fprintf(log, "vsockd: QEMU closed its socket; %d connections, %d packets and %d bytes from the guest, %d packets and %d bytes to it\n",
		st.Connections, st.PacketsFromGuest, st.BytesFromGuest, st.PacketsToGuest, st.BytesToGuest)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("vhost-user session: %w", err)
	}
	return nil
}
