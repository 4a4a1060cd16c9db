// Command devlxdget is the test guest's client of /dev/lxd/sock: it sends
// one GET request and copies the raw HTTP answer (status line, headers and
// body) to stdout, so the guest's /init can show what guest software reads
// from the devlxd API. Busybox cannot speak HTTP over a Unix socket, and the
// tool stays small (no net/http) to keep the initramfs quick to unpack.
//
//	devlxdget [--socket /dev/lxd/sock] PATH
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "devlxdget: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("devlxdget", flag.ContinueOnError)
	socket := fs.String("socket", "/dev/lxd/sock", "devlxd socket")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: devlxdget [--socket PATH] PATH")
	}
	path := fs.Arg(0)
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
		return fmt.Errorf("path %q: must start with / and contain no spaces or line breaks", path)
	}
	conn, err := net.DialTimeout("unix", *socket, *timeout)
	if err != nil {
		return fmt.Errorf("dialing %s: %w", *socket, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(*timeout)); err != nil {
		return fmt.Errorf("setting a deadline on %s: %w", *socket, err)
	}
	// HTTP/1.0: the server closes the connection after its answer.
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.0\r\nHost: lxd\r\n\r\n"); err != nil {
		return fmt.Errorf("sending GET %s: %w", path, err)
	}
	if _, err := io.Copy(out, conn); err != nil {
		return fmt.Errorf("reading the answer to GET %s: %w", path, err)
	}
	return nil
}
