package hangup_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/internal/hangup"
	"github.com/guestlink/guestlink/internal/testcert"
)

// pair returns the two ends of a connection over network ("unix" or
// "tcp"): the client's and the server's.
func pair(t *testing.T, network string) (client, server net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestClientCloses: on a Unix socket, TCP and TLS over TCP, the context
// ends with ErrClientGone when the client closes its end; stop then
// returns.
func TestClientCloses(t *testing.T) {
	for _, network := range []string{"unix", "tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			var client, server net.Conn
			if network == "tls" {
				c, s := pair(t, "tcp")
				tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
				ts := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "daemon").TLS()}})
				done := make(chan error, 1)
				go func() { done <- tc.Handshake() }()
				if err := ts.Handshake(); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				client, server = tc, ts
			} else {
				client, server = pair(t, network)
			}
			ctx, stop := hangup.Context(context.Background(), server)
			defer stop()
			if ctx.Err() != nil {
				t.Fatalf("the context ended before the client closed: %v", context.Cause(ctx))
			}
			client.Close()
			<-ctx.Done()
			if cause := context.Cause(ctx); !errors.Is(cause, hangup.ErrClientGone) {
				t.Fatalf("the context ended with %v, want ErrClientGone", cause)
			}
		})
	}
}

// TestStop: stop ends the watch of a connection that stays open, also one
// whose client sent more bytes (a pipelined request is no hang-up); the
// context then ends as cancelled, not as gone, and the bytes are still
// there for the server to read.
func TestStop(t *testing.T) {
	client, server := pair(t, "unix")
	ctx, stop := hangup.Context(context.Background(), server)
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	stop()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) || errors.Is(cause, hangup.ErrClientGone) {
		t.Fatalf("after stop the context's cause is %v, want context.Canceled", cause)
	}
	buf := make([]byte, 16)
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("the server read %q, %v after the watch", buf[:n], err)
	}
}

// TestNoSocket: a connection with no socket underneath (net.Pipe) is not
// watched: the context ends with its parent or stop.
func TestNoSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop := hangup.Context(parent, b)
	defer stop()
	cancel()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}
