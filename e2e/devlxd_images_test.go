package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/images/imagetest"
)

// TestDevlxdImageExport checks devlxd's GET /1.0/images/{fingerprint}/export
// against the daemon's real image store, through the guest's agent: 403
// while security.devlxd.images is off; once it is on, 404 for a private
// image (as LXD: only public or cached images are served), the image's
// exact bytes once it is made public, 404 for an image the store does not
// have.
func TestDevlxdImageExport(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	payload := make([]byte, 1<<20) // random bytes behind a qcow2 header: the export must give them exactly
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	img := imagetest.QCOW2(payload)
	file := filepath.Join(t.TempDir(), "tiny.img")
	if err := os.WriteFile(file, img, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(img)
	fp := hex.EncodeToString(sum[:])
	got, err := d.client.ImportImage(ctx, api.ImagesPost{Path: file, Alias: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint != fp {
		t.Fatalf("imported fingerprint %s, want %s", got.Fingerprint, fp)
	}

	g := d.launch(ctx, "imgx", nil, nil)
	path := "/1.0/images/" + fp + "/export"
	if a := curlDevlxd(ctx, t, g.socket, "GET", path, ""); a.status != 403 {
		t.Fatalf("export with security.devlxd.images unset: %d %q, want 403", a.status, a.body)
	}
	if _, err := d.client.UpdateConfig(ctx, "imgx", map[string]string{"security.devlxd.images": "true"}, nil); err != nil {
		t.Fatal(err)
	}
	// Imported without --public: private, and LXD answers Not Found for
	// a private image (in the main API's envelope).
	notFound := `{"type":"error","status":"","status_code":0,"operation":"","error_code":404,"error":"Not Found","metadata":null}` + "\n"
	if a := curlDevlxd(ctx, t, g.socket, "GET", path, ""); a.status != 404 || a.contentType != "application/json" || string(a.body) != notFound {
		t.Fatalf("export of a private image: %d %q %q, want 404 %q", a.status, a.contentType, a.body, notFound)
	}
	// LXD's API error carries nosniff; the agent relays it to the guest.
	if h := devlxdHeaders(ctx, t, g.socket, path); h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("export error headers %v: want X-Content-Type-Options: nosniff", h)
	}
	public := true
	if im, err := d.client.UpdateImage(ctx, "tiny", api.ImagePatch{Public: &public}); err != nil || !im.Public {
		t.Fatalf("making the image public: %+v, %v", im, err)
	}
	a := curlDevlxd(ctx, t, g.socket, "GET", path, "")
	if a.status != 200 {
		t.Fatalf("export: %d %q", a.status, a.body)
	}
	if s := sha256.Sum256(a.body); s != sum {
		t.Fatalf("exported %d bytes with sha256 %x, want the image's %d bytes (%s)", len(a.body), s, len(img), fp)
	}
	other := sha256.Sum256([]byte("no such image"))
	if a := curlDevlxd(ctx, t, g.socket, "GET", "/1.0/images/"+hex.EncodeToString(other[:])+"/export", ""); a.status != 404 {
		t.Fatalf("export of an unknown image: %d %q, want 404", a.status, a.body)
	}
}

// devlxdHeaders sends GET path to the guest's /dev/lxd/sock and returns the
// answer's headers.
func devlxdHeaders(ctx context.Context, t *testing.T, socket, path string) http.Header {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lxd"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, socket, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.Header
}
