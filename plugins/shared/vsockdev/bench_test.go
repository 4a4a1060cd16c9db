package vsockdev_test

import (
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/guestlink/guestlink/link/hybrid"
	"github.com/guestlink/guestlink/plugins/shared/vhostuser/vhostusertest"
	"github.com/guestlink/guestlink/plugins/shared/vsockdev"
)

// BenchmarkGuestToHost streams 4 KiB RW packets from a driver played by
// vhostusertest (through a real vhost-user session, memfd and eventfds)
// to a host Unix listener, as fast as the device's credit allows. It
// reports MB/s and the CPU time of the whole test process per packet
// (device, driver and host reader together: an upper bound of the
// device's own cost).
func BenchmarkGuestToHost(b *testing.B) {
	g := newGuest(b, 0)
	ln, err := net.Listen("unix", hybrid.HostPath(g.uds, 11))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	g.send(vsockdev.Header{SrcPort: 7000, DstPort: 11, Op: vsockdev.OpRequest}, nil)
	host, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	resp, _ := g.expect(vsockdev.OpResponse, 11, 7000)
	window := resp.BufAlloc
	copied := make(chan struct{})
	go func() { io.Copy(io.Discard, host); close(copied) }()
	defer func() { host.Close(); <-copied }()

	const size = 4096
	payload := make([]byte, size)
	tx := g.f.Queues[vsockdev.QueueTx]
	var sent, fwd uint32
	outstanding := 0
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.SetBytes(size)
	packets := 0
	for b.Loop() {
		for sent-fwd+size > window { // out of credit: wait for the device's CREDIT_UPDATE
			h, _ := g.recv()
			if h.Op == vsockdev.OpCreditUpdate || h.Op == vsockdev.OpRW {
				fwd = h.FwdCnt
			}
		}
		for outstanding >= vhostusertest.QueueSize/2 { // reclaim tx buffers before reusing slots
			if _, _, ok := tx.TakeUsed(); ok {
				outstanding--
				continue
			}
			tx.WaitCall(10e9)
		}
		// One descriptor per packet: a chain would take the next slot's
		// descriptor, still in flight (see OfferReadable).
		h := vsockdev.Header{SrcCID: guestCID, DstCID: vsockdev.HostCID, SrcPort: 7000, DstPort: 11, Len: size, Type: vsockdev.TypeStream, Op: vsockdev.OpRW, BufAlloc: 64 << 10}
		tx.OfferReadable(append(h.Append(nil), payload...))
		sent += size
		outstanding++
		packets++
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := float64(ru1.Utime.Nano()-ru0.Utime.Nano()+ru1.Stime.Nano()-ru0.Stime.Nano()) / 1e3
	b.ReportMetric(cpu/float64(packets), "process-cpu-us/packet")
}
