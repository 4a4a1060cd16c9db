package adminapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/transport/adminapi/apitest"
)

// consoles maps instance names to log paths.
type consoles map[string]string

func (c consoles) ConsoleLog(_ context.Context, name string) (string, error) {
	p, ok := c[name]
	if !ok {
		return "", fmt.Errorf("instance %q: %w", name, errdefs.ErrNotFound)
	}
	return p, nil
}

// TestConsoleFollowOverTCP: the console route needs credentials on TCP,
// and a follow stream ends once its token is revoked, even while the
// guest keeps printing.
func TestConsoleFollowOverTCP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(path, []byte("boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, apitest.Options{Auth: true, PingInterval: 50 * time.Millisecond, Consoles: consoles{"c1": path}})
	addr := srv.ServeTCP(t)
	token := srv.BearerToken(t, "ci")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := http.Get("http://" + addr + "/1.0/instances/c1/console")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("console without credentials: %d, want 401", res.StatusCode)
	}

	c, err := client.NewWithOptions("http://"+addr, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Console(ctx, "c1", client.ConsoleOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "boot\n" {
		t.Fatalf("first bytes %q, %v", buf, err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the guest keeps printing
		defer close(done)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = f.WriteString("line\n")
			}
		}
	}()
	defer func() { close(stop); <-done }()
	if err := srv.Auth.RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("stream after revocation: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the follow stream outlived its revoked token")
	}
}
