// Command vsockprobe runs inside the QEMU test guest of vsockdev: it
// listens on AF_VSOCK port LPORT, dials CID:PORT, writes "hello from
// guest\n" and prints the answer, then accepts one connection on LPORT and
// echoes one line back with "echo:" in front. Everything goes to stdout
// (the guest's console) prefixed with "vsockprobe:".
//
//	vsockprobe CID PORT LPORT
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/mdlayher/vsock"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Println("vsockprobe: error:", err)
		os.Exit(1)
	}
}

func num(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		fmt.Println("vsockprobe: bad number", s)
		os.Exit(2)
	}
	return uint32(n)
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: vsockprobe CID PORT LPORT")
	}
	cid, port, lport := num(args[0]), num(args[1]), num(args[2])
	ln, err := vsock.Listen(lport, nil)
	if err != nil {
		return fmt.Errorf("listen %d: %w", lport, err)
	}
	local, _ := vsock.ContextID()
	fmt.Printf("vsockprobe: local CID %d, listening on %d\n", local, lport)
	c, err := vsock.Dial(cid, port, nil)
	if err != nil {
		return fmt.Errorf("dial %d:%d: %w", cid, port, err)
	}
	if _, err := io.WriteString(c, "hello from guest\n"); err != nil {
		return err
	}
	answer, err := io.ReadAll(c)
	c.Close()
	if err != nil {
		return fmt.Errorf("reading the host's answer: %w", err)
	}
	fmt.Printf("vsockprobe: host answered %q\n", answer)
	a, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	line, err := bufio.NewReader(a).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading from the host: %w", err)
	}
	fmt.Fprintf(a, "echo:%s", line)
	a.Close()
	fmt.Println("vsockprobe: echoed", line)
	return nil
}
