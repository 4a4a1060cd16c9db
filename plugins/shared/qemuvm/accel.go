package qemuvm

import (
	"bufio"
	"os"
	"strings"
)

// HostCaps is what the host offers QEMU.
type HostCaps struct {
	KVM        bool // /dev/kvm opens and the CPU shows vmx or svm
	VhostVsock bool // /dev/vhost-vsock exists
	KVMDetail  string
}

// ProbeHost checks the host's acceleration and vsock support. /dev/kvm can
// exist on nested hosts whose CPU lacks vmx/svm, where a KVM guest never gets
// past its firmware: both conditions are required.
func ProbeHost() HostCaps {
	var c HostCaps
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	switch {
	case err != nil:
		c.KVMDetail = "/dev/kvm: " + err.Error()
	case !cpuHasVirt("/proc/cpuinfo"):
		f.Close()
		c.KVMDetail = "/dev/kvm opens but the CPU flags show neither vmx nor svm"
	default:
		f.Close()
		c.KVM = true
	}
	if _, err := os.Stat("/dev/vhost-vsock"); err == nil {
		c.VhostVsock = true
	}
	return c
}

// cpuHasVirt reports whether the cpuinfo file lists vmx or svm.
func cpuHasVirt(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		_, flags, _ := strings.Cut(line, ":")
		for _, fl := range strings.Fields(flags) {
			if fl == "vmx" || fl == "svm" {
				return true
			}
		}
	}
	return false
}

// resolveAccel picks the accelerator for the configured value.
func resolveAccel(configured string, caps HostCaps) string {
	switch configured {
	case AccelKVM, AccelTCG:
		return configured
	}
	if caps.KVM {
		return AccelKVM
	}
	return AccelTCG
}
