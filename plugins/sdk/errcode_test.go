package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

func TestErrorKindsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		kind error
		code codes.Code
	}{
		{"not found", ErrNotFound, codes.NotFound},
		{"invalid", ErrInvalid, codes.InvalidArgument},
		{"conflict", ErrConflict, codes.FailedPrecondition},
		{"not supported", ErrNotSupported, codes.Unimplemented},
		{"unavailable", ErrUnavailable, codes.Unavailable},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := fmt.Errorf("starting guest %q: %w", "web1", tt.kind)
			wire := toStatus(orig)
			if got := status.Code(wire); got != tt.code {
				t.Fatalf("code = %v, want %v", got, tt.code)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.kind == context.Canceled {
				cancel() // a cancellation is the caller's only when its ctx ended
			}
			back := fromStatus(ctx, wire)
			if !errors.Is(back, tt.kind) {
				t.Fatalf("errors.Is(%v, %v) = false", back, tt.kind)
			}
			if back.Error() != orig.Error() {
				t.Fatalf("message = %q, want %q", back.Error(), orig.Error())
			}
		})
	}
	t.Run("kind-less", func(t *testing.T) {
		back := fromStatus(context.Background(), toStatus(errors.New("disk full")))
		for _, kc := range kindCodes {
			if errors.Is(back, kc.kind) {
				t.Fatalf("kind-less error matches %v", kc.kind)
			}
		}
		if back.Error() != "disk full" {
			t.Fatalf("message = %q", back.Error())
		}
	})
	t.Run("not a status", func(t *testing.T) {
		if back := fromStatus(context.Background(), errors.New("broken pipe")); !errors.Is(back, ErrUnavailable) {
			t.Fatalf("transport error %v is not ErrUnavailable", back)
		}
	})
	t.Run("connection closed", func(t *testing.T) {
		closed := status.Error(codes.Canceled, "grpc: the client connection is closing")
		if back := fromStatus(context.Background(), closed); !errors.Is(back, ErrUnavailable) {
			t.Fatalf("cancellation with a live ctx = %v, want ErrUnavailable", back)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if back := fromStatus(ctx, closed); !errors.Is(back, context.Canceled) {
			t.Fatalf("cancellation with a canceled ctx = %v, want context.Canceled", back)
		}
	})
	t.Run("nil", func(t *testing.T) {
		if toStatus(nil) != nil || fromStatus(context.Background(), nil) != nil {
			t.Fatal("nil error not kept nil")
		}
	})
}

// TestContractKindsAreTheSDKs checks that an error kind returned under
// its contract name (as the daemon's services see it) comes back from the
// wire matching both names: sdk's error kinds are the contract's values,
// not copies, so a plugin that returns sdk.ErrConflict is seen by a
// service that checks contract.ErrConflict, and the other way round.
func TestContractKindsAreTheSDKs(t *testing.T) {
	tests := []struct {
		name          string
		contract, sdk error
	}{
		{"not found", contract.ErrNotFound, ErrNotFound},
		{"invalid", contract.ErrInvalid, ErrInvalid},
		{"conflict", contract.ErrConflict, ErrConflict},
		{"not supported", contract.ErrNotSupported, ErrNotSupported},
		{"unavailable", contract.ErrUnavailable, ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sent := range []error{tt.contract, tt.sdk} {
				back := fromStatus(context.Background(), toStatus(fmt.Errorf("guest %q: %w", "web1", sent)))
				if !errors.Is(back, tt.contract) || !errors.Is(back, tt.sdk) {
					t.Fatalf("sent %v, got %v: matches contract's %v, sdk's %v; want both", sent, back, errors.Is(back, tt.contract), errors.Is(back, tt.sdk))
				}
			}
		})
	}
}

func TestStderrTail(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"plain", "panic: boom\ngoroutine 1\n", "panic: boom | goroutine 1"},
		{"hclog json", `{"@level":"error","@message":"disk full","@timestamp":"x","path":"/a"}` + "\n", "disk full path=/a"},
		{"partial line", "no newline", "no newline"},
		{"keeps last lines", strings.Repeat("x\n", 20) + "last\n", strings.Repeat("x | ", tailLines-1) + "last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tail stderrTail
			tail.Write([]byte(tt.input))
			if got := tail.String(); got != tt.want {
				t.Fatalf("tail = %q, want %q", got, tt.want)
			}
		})
	}
}
