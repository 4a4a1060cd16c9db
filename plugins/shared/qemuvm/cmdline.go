package qemuvm

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/link/sdnotify"
	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// Files of a guest's directory.
const (
	qmpSocket   = "qmp.sock"
	linkSocket  = "link.sock"
	consoleLog  = "console.log"
	qemuLog     = "qemu.log"
	bootInitrd  = "boot-initrd.img" // base initrd + config drive
	stateFile   = "state"           // saved by a stateful stop
	stateMeta   = "state.json"
	vhostFDArg  = 3 // the vhost-vsock fd is the first extra file
	kernelParam = "console=ttyS0 panic=-1 loglevel=4"
)

// launch is everything that goes into one QEMU command line.
type launch struct {
	Name    string
	UUID    string
	Dir     string
	Config  *Config
	Accel   string // kvm or tcg (resolved)
	Layout  Layout
	Link    sdk.LinkKind // serial or vsock (resolved)
	CID     uint32       // for LinkVsock
	Vsock   string       // the vsock device: VsockKernel, VsockUser or ""
	Initrd  string       // the initrd actually passed (with config drive), "" for none
	Restore bool         // -incoming defer: the state is loaded through QMP
	Disks   []coldDisk   // disks present at start, on the hot-plug ports (hotplug.go)
	NICs    []nic        // user-mode network devices
}

// args returns QEMU's arguments (without the binary).
func (l *launch) args() []string {
	p := func(f string) string { return filepath.Join(l.Dir, f) }
	machine := "q35,accel=" + l.Accel
	a := []string{
		"-S",
		"-name", "guest=" + qemuOpt(l.Name) + ",debug-threads=on",
		"-uuid", l.UUID,
		"-machine", machine,
	}
	if l.Accel == AccelKVM {
		a = append(a, "-cpu", "host")
	}
	a = append(a,
		"-m", strconv.Itoa(l.Config.MemoryMiB),
	)
	if l.Vsock == VsockUser {
		// A vhost-user device reads the guest's memory: it must be shared.
		a = append(a, "-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", l.Config.MemoryMiB),
			"-numa", "node,memdev=mem")
	}
	a = append(a,
		"-smp", strconv.Itoa(l.Config.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none",
		// A guest that powers off leaves QEMU paused, not gone: the
		// backend reads the ring's last bytes (the agent's STOPPED)
		// before it tells QEMU to quit (qmppump.go afterShutdown).
		"-no-shutdown",
		"-smbios", "type=2,product=LXD",
	)
	if l.Link == sdk.LinkVsock {
		// The guest has a vsock device: a guest systemd >= 254 sends
		// READY=1 to the host's notification port once it finished
		// booting (link/sdnotify; the daemon listens on it).
		a = append(a, "-smbios", "type=11,value="+qemuOpt(sdnotify.Credential(sdnotify.Port)))
	}
	a = append(a,
		"-qmp", "unix:"+qemuOpt(p(qmpSocket))+",server=on,wait=off",
		"-chardev", "file,id=console,path="+qemuOpt(p(consoleLog)),
		"-serial", "chardev:console",
		"-kernel", l.Config.Kernel,
	)
	if l.Initrd != "" {
		a = append(a, "-initrd", l.Initrd)
	}
	cmdline := kernelParam
	disk := diskArgs(l.Dir)
	if disk != nil {
		cmdline += " root=/dev/vda rw"
	}
	switch l.Link {
	case sdk.LinkSerial:
		cmdline += " guestlink.link=serial:" + serialmux.PortName
	case sdk.LinkVsock:
		cmdline += " guestlink.link=vsock"
	}
	if l.Config.Append != "" {
		cmdline += " " + l.Config.Append
	}
	a = append(a, "-append", cmdline)
	a = append(a,
		"-device", "virtio-serial-pci,id="+serialBusID+",bus=pcie.0,addr=0x3",
		"-chardev", "ringbuf,id="+RingChardev+",size="+strconv.Itoa(RingSize),
	)
	if l.Link == sdk.LinkSerial {
		a = append(a, "-chardev", "socket,id="+linkChardev+",path="+qemuOpt(p(linkSocket))+",server=on,wait=off")
	}
	for _, pt := range l.Layout.ports(l.Link == sdk.LinkSerial) {
		dev := fmt.Sprintf("virtserialport,bus=%s.0,nr=%d,name=%s,id=%s", serialBusID, pt.nr, pt.name, pt.id)
		if pt.chardev != "" {
			dev += ",chardev=" + pt.chardev
		}
		a = append(a, "-device", dev)
	}
	a = append(a, disk...)
	a = append(a, configDriveArgs(l.Dir)...)
	a = append(a, nicArgs(l.NICs)...)
	if l.Vsock == VsockUser {
		a = append(a, "-chardev", "socket,id=vsockvu,path="+qemuOpt(p(vsockVhostSocket)),
			"-device", "vhost-user-vsock-pci,id=vsock,bus=pcie.0,addr=0x4,chardev=vsockvu")
	}
	if l.Link == sdk.LinkVsock && l.Vsock != VsockUser { // the kernel's vhost-vsock
		a = append(a, "-device", fmt.Sprintf("vhost-vsock-pci,id=vsock,bus=pcie.0,addr=0x4,guest-cid=%d,vhostfd=%d", l.CID, vhostFDArg))
	}
	a = append(a, hotplugPortArgs()...) // hotplug.go
	a = append(a, coldDiskArgs(l.Disks)...)
	if l.Restore {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// qemuOpt escapes a value inside a QEMU option list (commas are doubled).
func qemuOpt(s string) string { return strings.ReplaceAll(s, ",", ",,") }
