// Command vsockbench runs inside a QEMU test guest on guestlink's vsock
// device (BenchmarkAgentVsock, e2e/bench_vsock_test.go) and measures:
//
//   - GET /1.0 through the agent's /dev/lxd/sock (the agent forwards it to
//     the daemon over AF_VSOCK) beside the floor, a plain net/http GET on a
//     Unix socket served in this process with the same bytes, both kept
//     alive, one request on each per iteration in a new order each time;
//   - the device's throughput guest to host on one connection: MB bytes
//     written to CID 2 port PORT (the host reads that many and answers
//     "ok <n>\n"), timed from the dial to the answer.
//
// It prints one line per figure, "vsockbench: NAME VALUE UNIT".
//
//	vsockbench -n N -port PORT -mb MB
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mdlayher/vsock"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vsockbench:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 200, "GET iterations")
	port := flag.Uint("port", 0, "host port (CID 2) of the throughput test")
	mb := flag.Int("mb", 16, "MiB sent to the host")
	flag.Parse()

	devlxd := unixClient("/dev/lxd/sock")
	get := func(c *http.Client) ([]byte, error) {
		resp, err := c.Get("http://lxd/1.0")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return b, err
	}
	body, err := get(devlxd)
	if err != nil {
		return fmt.Errorf("GET /1.0 through the agent: %w", err)
	}
	dir, err := os.MkdirTemp("", "vsockbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "floor.sock"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	floor := unixClient(filepath.Join(dir, "floor.sock"))
	if _, err := get(floor); err != nil {
		return fmt.Errorf("GET from the floor server: %w", err)
	}

	clients := []*http.Client{devlxd, floor}
	lat := [2][]time.Duration{}
	order := rand.New(rand.NewPCG(14, 14))
	idx := []int{0, 1}
	for range *n {
		order.Shuffle(2, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for _, i := range idx {
			start := time.Now()
			if _, err := get(clients[i]); err != nil {
				return fmt.Errorf("GET /1.0 (path %d): %w", i, err)
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	for i, name := range []string{"agent-vsock", "floor"} {
		slices.Sort(lat[i])
		fmt.Printf("vsockbench: %s-p50 %d us\n", name, pct(lat[i], 50).Microseconds())
		fmt.Printf("vsockbench: %s-p99 %d us\n", name, pct(lat[i], 99).Microseconds())
	}

	if *port == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := vsock.Dial(vsock.Host, uint32(*port), nil)
	if err != nil {
		return fmt.Errorf("dialing the host at 2:%d: %w", *port, err)
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	buf := make([]byte, 64<<10)
	total := *mb << 20
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("writing to the host after %d bytes: %w", sent, err)
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != fmt.Sprintf("ok %d\n", total) {
		return fmt.Errorf("the host's answer %q, %v; want ok %d", strings.TrimSpace(line), err, total)
	}
	el := time.Since(start)
	fmt.Printf("vsockbench: throughput %.1f MB/s\n", float64(total)/1e6/el.Seconds())
	return nil
}

// pct returns the p-th percentile of sorted d.
func pct(d []time.Duration, p int) time.Duration {
	i := (len(d)*p + 99) / 100
	if i > 0 {
		i--
	}
	return d[i]
}

// unixClient is a kept-alive HTTP client of the Unix socket path.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 2,
	}}
}
