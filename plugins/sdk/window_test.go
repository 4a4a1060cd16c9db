package sdk

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// recordingConn keeps what the client's end of a connection wrote.
type recordingConn struct {
	net.Conn
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// pings counts the PING frames (not acknowledgements) in what a client
// wrote after the connection preface.
func pings(t *testing.T, written []byte) int {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(bytes.TrimPrefix(written, []byte(http2.ClientPreface))))
	n := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("parsing the client's frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
}

// TestStaticWindowsNoProbe: with the plugin connection's windows (Launch's
// dial options, Serve's server options) the client sends no
// bandwidth-delay PING after an answer, which the peer must acknowledge
// (two more wake-ups at each end per message of an idle daemon). Tried: 50
// calls in a row on a real gRPC connection over a unix socket, every frame
// the client wrote parsed, with the windows and, as a control that shows
// the probe is there to remove, with gRPC's defaults.
func TestStaticWindowsNoProbe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dial   []grpc.DialOption
		srv    []grpc.ServerOption
		probes bool // PINGs from the client
	}{
		{name: "plugin windows", dial: windowDialOptions(), srv: windowServerOptions()},
		{name: "gRPC defaults (control)", probes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("unix", t.TempDir()+"/s")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(tc.srv...)
			healthpb.RegisterHealthServer(srv, health.NewServer())
			go srv.Serve(ln)
			defer srv.Stop()
			var mu sync.Mutex
			var written bytes.Buffer
			dial := func(ctx context.Context, _ string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "unix", ln.Addr().String())
				if err != nil {
					return nil, err
				}
				return recordingConn{c, &mu, &written}, nil
			}
			opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial)}, tc.dial...)
			cc, err := grpc.NewClient("passthrough:///plugin", opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			ctx := context.Background()
			const calls = 50
			for range calls {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			cc.Close()
			mu.Lock()
			n := pings(t, written.Bytes())
			mu.Unlock()
			if (n > 0) != tc.probes {
				t.Fatalf("the client sent %d PINGs in %d calls; want probes: %v", n, calls, tc.probes)
			}
			t.Logf("%d PINGs in %d calls", n, calls)
		})
	}
}
