package pluginhost_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/plugins/sdk"
)

// usable is the optional method of the host's backends the daemon calls
// before it creates or starts a guest.
type usable interface {
	Usable(ctx context.Context) error
}

// TestMissingMakesUnhealthy runs a real plugin process that reports in its
// Info that the host lacks qemu-img: List shows it "unhealthy" with what is
// missing, Usable refuses with errdefs.ErrUnavailable naming the package,
// while calls that do not make guests still go through. Then the behaviour
// file "installs" the package: Usable asks the plugin again and passes at
// once, and the health is "healthy" without a restart; taking it away again
// turns the plugin unhealthy at the next health ping.
func TestMissingMakesUnhealthy(t *testing.T) {
	missing := []sdk.Missing{{What: "qemu-img", Reason: "not found in PATH", Package: "qemu-utils"}}
	dir, bdir := pluginDir(t, map[string]map[string]any{"vm": {"missing": missing}})
	h := startHost(t, testConfig(dir, bdir))
	st := status(h, "vm")
	if st.Health != pluginhost.HealthUnhealthy || !slices.Equal(st.Missing, missing) || st.PID == 0 {
		t.Fatalf("status = %+v, want health unhealthy, a running process and Missing %+v", st, missing)
	}
	b, err := h.Backend("vm")
	if err != nil {
		t.Fatal(err)
	}
	u, ok := b.(usable)
	if !ok {
		t.Fatalf("the host's backend %T has no Usable method", b)
	}
	ctx := ctxT(t)
	err = u.Usable(ctx)
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Usable = %v, want an unavailable error", err)
	}
	want := `backend "vm" cannot run guests: qemu-img not found in PATH (Debian package qemu-utils); install: apt-get install qemu-utils`
	if err.Error() != want {
		t.Fatalf("Usable error\n %q, want\n %q", err, want)
	}
	// The plugin still answers what does not make guests: an unhealthy
	// backend's guests can be looked at, stopped and deleted.
	if _, err := b.State(ctx, sdk.Handle("\x00garbage")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("State on an unhealthy backend = %v, want the plugin's own invalid-handle error", err)
	}

	setBehaviour(t, bdir, "vm", nil) // the package was installed
	if err := u.Usable(ctx); err != nil {
		t.Fatalf("Usable after the fix = %v, want nil", err)
	}
	if st := status(h, "vm"); st.Health != pluginhost.HealthHealthy || len(st.Missing) != 0 || st.Restarts != 0 {
		t.Fatalf("status after the fix = %+v, want healthy, nothing missing, no restart", st)
	}

	setBehaviour(t, bdir, "vm", map[string]any{"missing": missing}) // removed again
	waitFor(t, "the health ping to see qemu-img gone", func() bool {
		return status(h, "vm").Health == pluginhost.HealthUnhealthy
	})
	if st := status(h, "vm"); !strings.Contains(sdk.MissingText(st.Missing), "qemu-utils") || st.Restarts != 0 {
		t.Fatalf("status = %+v, want qemu-utils named and no restart", st)
	}
}
