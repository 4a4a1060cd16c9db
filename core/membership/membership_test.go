package membership_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/errdefs"
)

// TestLeaseLostError checks what callers test a refused write by: the
// error, wrapped with context as the store and the cluster wrap it, is
// ErrLeaseLost and errdefs.ErrUnavailable (503), is no other kind, says
// why, and is found as a *LeaseLostError with its reason.
func TestLeaseLostError(t *testing.T) {
	reason := errors.New("member f was removed from the cluster")
	err := fmt.Errorf("updating instance %q: %w", "web1", &membership.LeaseLostError{Reason: reason})
	for _, tc := range []struct {
		kind error
		want bool
	}{
		{membership.ErrLeaseLost, true},
		{errdefs.ErrUnavailable, true},
		{errdefs.ErrNotFound, false},
		{errdefs.ErrConflict, false},
	} {
		if got := errors.Is(err, tc.kind); got != tc.want {
			t.Errorf("errors.Is(%v, %v) = %t, want %t", err, tc.kind, got, tc.want)
		}
	}
	want := `updating instance "web1": this member's lease on its instances is gone: member f was removed from the cluster`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	lost, ok := errors.AsType[*membership.LeaseLostError](err)
	if !ok || lost.Reason != reason {
		t.Errorf("AsType = %v, %t; want the reason %v", lost, ok, reason)
	}
}
