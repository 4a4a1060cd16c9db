// Command devlxdget is the test guest's client of /dev/lxd/sock: it sends
// one request and copies the raw HTTP answer (status line, headers and
// body) to stdout, so the guest's /init can show what guest software reads
// from the devlxd API. Busybox cannot speak HTTP over a Unix socket, and the
// tool stays small (no net/http) to keep the initramfs quick to unpack.
//
//	devlxdget [--socket /dev/lxd/sock] [--method GET] [--data-b64 B64] [--token T] PATH
//	devlxdget --stream --ready FILE [--token T] PATH
//
// --token sends Authorization: Bearer T (a devlxd identity's token). With
// --stream it reads a long answer (GET /1.0/events), creates FILE once the
// answer's header arrived (the subscription exists), and prints every JSON
// line of the body as "guestlink: EVENT <base64 of the line>".
package main

import (
	"bufio"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
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
	method := fs.String("method", "GET", "HTTP method")
	data := fs.String("data-b64", "", "request body, base64")
	token := fs.String("token", "", "bearer token")
	stream := fs.Bool("stream", false, "print the body's JSON lines as they come (events)")
	ready := fs.String("ready", "", "with --stream: file created once the answer's header arrived")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: devlxdget [--socket PATH] [--method M] [--data-b64 B] [--token T] [--stream --ready FILE] PATH")
	}
	path := fs.Arg(0)
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
		return fmt.Errorf("path %q: must start with / and contain no spaces or line breaks", path)
	}
	body, err := base64.StdEncoding.DecodeString(*data)
	if err != nil {
		return fmt.Errorf("--data-b64: %w", err)
	}
	conn, err := net.DialTimeout("unix", *socket, *timeout)
	if err != nil {
		return fmt.Errorf("dialing %s: %w", *socket, err)
	}
	defer conn.Close()
	if !*stream {
		if err := conn.SetDeadline(time.Now().Add(*timeout)); err != nil {
			return fmt.Errorf("setting a deadline on %s: %w", *socket, err)
		}
	}
	// HTTP/1.0: the server closes the connection after its answer.
	req := *method + " " + path + " HTTP/1.0\r\nHost: lxd\r\n"
	if *token != "" {
		req += "Authorization: Bearer " + *token + "\r\n"
	}
	if len(body) > 0 {
		req += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"+string(body)); err != nil {
		return fmt.Errorf("sending %s %s: %w", *method, path, err)
	}
	if !*stream {
		if _, err := io.Copy(out, conn); err != nil {
			return fmt.Errorf("reading the answer to %s %s: %w", *method, path, err)
		}
		return nil
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the header of %s: %w", path, err)
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, nil, 0o644); err != nil {
			return err
		}
	}
	for {
		line, err := r.ReadString('\n')
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") {
			fmt.Fprintf(out, "guestlink: EVENT %s\n", base64.StdEncoding.EncodeToString([]byte(t)))
		}
		if err != nil {
			return nil
		}
	}
}
