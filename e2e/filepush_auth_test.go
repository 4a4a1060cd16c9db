package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/client"
)

// TestFilePushRefusedByAuth pushes a 64 MiB file (far bigger than the
// socket buffers, streamed from disk) over TCP with an identity that may
// not push: none or a wrong token (401) and a viewer's token (403). The
// refusal comes from the authentication middleware, before the files
// handler, while the client is still sending; every client must show the
// daemon's refusal and status, not the "broken pipe" or "connection reset"
// of a body the daemon stopped reading (what guestlink file push printed
// before the refusals were drained). Tried: guestlink file push through a
// remote with the viewer's token and one with a wrong token, the Go
// client with no token and with the viewer's token, and net/http posting
// with a Content-Length and no Expect as LXD's client does; each five
// times, since a lost answer is a race between the daemon closing and the
// client reading (before the fix, net/http's POST got "sendfile:
// connection reset by peer" in one of three rounds here). Afterwards the
// daemon still answers.
func TestFilePushRefusedByAuth(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := newTCPDaemon(t)
	d.cli(ctx, "auth", "identity", "create", "bearer/watch", "--role", "viewer")
	viewer := strings.TrimSpace(d.cli(ctx, "auth", "identity", "token", "issue", "bearer/watch"))
	cfg := t.TempDir()
	d.mustRemote(ctx, cfg, "remote", "add", "view", d.httpURL, "--token", viewer)
	d.mustRemote(ctx, cfg, "remote", "add", "wrong", d.httpURL, "--token", "glt_"+strings.Repeat("0", 43))

	src := filepath.Join(t.TempDir(), "big")
	const size = 64 << 20
	writeRandom(t, src, size)
	const target = "/root/big"

	// refused checks one answer: the status, a message that says why, and
	// no sign of a broken connection.
	refused := func(t *testing.T, how string, code, wantCode int, msg, want string) {
		t.Helper()
		if code != wantCode || !strings.Contains(msg, want) || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") {
			t.Errorf("%s: %d %q, want %d saying %q", how, code, msg, wantCode, want)
		}
	}
	goPush := func(t *testing.T, token string) (int, string) {
		t.Helper()
		c, err := client.NewWithOptions(d.httpURL, client.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		err = c.PushFile(ctx, "any", target, f, size, client.FileArgs{})
		var se *client.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("PushFile: %v, want the daemon's refusal", err)
		}
		return se.Code, se.Message
	}
	for i := range 5 {
		t.Run("cli viewer", func(t *testing.T) {
			_, errOut, err := d.remoteCLI(ctx, cfg, "--remote", "view", "file", "push", src, "any"+target)
			if err == nil {
				t.Fatalf("push %d as a viewer succeeded", i)
			}
			// The CLI prints the daemon's message, not its status code.
			refused(t, "guestlink file push as a viewer", http.StatusForbidden, http.StatusForbidden, errOut, "has the role viewer")
		})
		t.Run("cli wrong token", func(t *testing.T) {
			_, errOut, err := d.remoteCLI(ctx, cfg, "--remote", "wrong", "file", "push", src, "any"+target)
			if err == nil {
				t.Fatalf("push %d with a wrong token succeeded", i)
			}
			refused(t, "guestlink file push with a wrong token", http.StatusUnauthorized, http.StatusUnauthorized, errOut, "token")
		})
		t.Run("go client no token", func(t *testing.T) {
			code, msg := goPush(t, "")
			refused(t, "PushFile without a token", code, http.StatusUnauthorized, msg, "Authorization: Bearer")
		})
		t.Run("go client viewer", func(t *testing.T) {
			code, msg := goPush(t, viewer)
			refused(t, "PushFile as a viewer", code, http.StatusForbidden, msg, "has the role viewer")
		})
		t.Run("net/http no token", func(t *testing.T) {
			f, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			hc := &http.Client{Transport: &http.Transport{}}
			defer hc.CloseIdleConnections()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.httpURL+"/1.0/instances/any/files?path="+target, f)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("X-LXD-type", "file")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("POST: %v, want the daemon's 401", err)
			}
			defer resp.Body.Close()
			var env struct {
				Error string `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatalf("POST answered %d with no JSON envelope: %v", resp.StatusCode, err)
			}
			refused(t, "net/http POST without a token", resp.StatusCode, http.StatusUnauthorized, env.Error, "Authorization: Bearer")
		})
	}
	if _, err := d.client.ServerInfo(ctx); err != nil {
		t.Fatalf("the daemon after the refused pushes: %v", err)
	}
}
