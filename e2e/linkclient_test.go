package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// agentConf is the part of a guest's agent.conf the link clients need.
type agentConf struct {
	Port        uint32 `json:"port"`
	Certificate string `json:"certificate"`
	Devlxd      bool   `json:"devlxd"`
}

// linkClient is an agent-side client of the daemon's devlxd handlers on one
// guest's hybrid link, presenting some guest's agent certificate.
type linkClient struct {
	socket string // <link.sock>_<port>
	tls    *tls.Config
}

// newLinkClient returns a client of the daemon over target's hybrid link
// presenting certOf's agent certificate, pinning the daemon certificate
// from target's agent.conf.
func newLinkClient(t *testing.T, target, certOf *guest) *linkClient {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(target.agentDir(), "agent.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var conf agentConf
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatalf("decoding %s's agent.conf: %v", target.name, err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certOf.agentDir(), "agent.crt"), filepath.Join(certOf.agentDir(), "agent.key"))
	if err != nil {
		t.Fatalf("loading %s's agent key pair: %v", certOf.name, err)
	}
	pinned := pemCert([]byte(conf.Certificate))
	if pinned == nil {
		t.Fatalf("%s's agent.conf has no daemon certificate", target.name)
	}
	return &linkClient{
		socket: filepath.Join(target.dir, "link.sock") + "_" + strconv.FormatUint(uint64(conf.Port), 10),
		tls: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, // pinned below, as the agent does
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !bytes.Equal(pinned, cs.PeerCertificates[0].Raw) {
					return errors.New("daemon certificate does not match agent.conf")
				}
				return nil
			},
		},
	}
}

// dial opens one TLS connection over the link.
func (l *linkClient) dial(ctx context.Context) (*tls.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "unix", l.socket)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", l.socket, err)
	}
	conn := tls.Client(raw, l.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake over %s: %w", l.socket, err)
	}
	return conn, nil
}

// envelope is the LXD envelope of a devlxd answer over the link.
type envelope struct {
	Type      string          `json:"type"`
	ErrorCode int             `json:"error_code"`
	Error     string          `json:"error"`
	Metadata  json.RawMessage `json:"metadata"`
}

// get sends GET path on conn and returns the HTTP status and envelope.
func linkGet(ctx context.Context, conn net.Conn, path string) (int, *envelope, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://guestlink"+path, nil)
	if err := req.Write(conn); err != nil {
		return 0, nil, fmt.Errorf("writing GET %s: %w", path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, nil, fmt.Errorf("reading answer to GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading body of GET %s: %w", path, err)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s answered %d %q: %w", path, resp.StatusCode, data, err)
	}
	return resp.StatusCode, &env, nil
}

// get dials, sends GET path and closes the connection.
func (l *linkClient) get(ctx context.Context, path string) (int, *envelope, error) {
	conn, err := l.dial(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	return linkGet(ctx, conn, path)
}

// pemCert returns the DER bytes of the first certificate in data (nil if
// there is none).
func pemCert(data []byte) []byte {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil
	}
	return b.Bytes
}
