package status

import (
	"errors"
	"testing"

	"github.com/guestlink/guestlink/errdefs"
)

func TestCodeString(t *testing.T) {
	tests := []struct {
		code Code
		want string
		num  int
	}{
		{OperationCreated, "Operation created", 100},
		{Started, "Started", 101},
		{Stopped, "Stopped", 102},
		{Running, "Running", 103},
		{Cancelling, "Cancelling", 104},
		{Pending, "Pending", 105},
		{Starting, "Starting", 106},
		{Stopping, "Stopping", 107},
		{Aborting, "Aborting", 108},
		{Freezing, "Freezing", 109},
		{Frozen, "Frozen", 110},
		{Thawed, "Thawed", 111},
		{Error, "Error", 112},
		{Ready, "Ready", 113},
		{Success, "Success", 200},
		{Failure, "Failure", 400},
		{Cancelled, "Cancelled", 401},
		{Code(999), "Unknown(999)", 999},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.code.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if int(tt.code) != tt.num {
				t.Errorf("code = %d, want %d", int(tt.code), tt.num)
			}
		})
	}
}

func TestDerive(t *testing.T) {
	tests := []struct {
		name  string
		power string
		ready bool
		op    string
		want  Code
	}{
		{"running ready", PowerRunning, true, OpNone, Ready},
		{"running not ready", PowerRunning, false, OpNone, Running},
		{"stopped", PowerStopped, false, OpNone, Stopped},
		{"stopped ignores stale ready", PowerStopped, true, OpNone, Stopped},
		{"no state yet", "", false, OpNone, Stopped},
		{"error", PowerError, false, OpNone, Error},
		{"unknown power state", "exploded", false, OpNone, Error},
		{"starting", PowerStopped, false, OpStarting, Starting},
		{"stopping a ready guest", PowerRunning, true, OpStopping, Stopping},
		{"unknown op ignored", PowerRunning, false, "frobbing", Running},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Derive(tt.power, tt.ready, tt.op); got != tt.want {
				t.Errorf("Derive(%q, %v, %q) = %v, want %v", tt.power, tt.ready, tt.op, got, tt.want)
			}
		})
	}
}

func TestIsRunning(t *testing.T) {
	for c := range names {
		want := c == Running || c == Ready
		if got := IsRunning(c); got != want {
			t.Errorf("IsRunning(%v) = %v, want %v", c, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Code
		wantErr bool
	}{
		{"Ready", Ready, false},
		{"Running", Running, false},
		{"running", Running, false},
		{"STOPPED", Stopped, false},
		{"Operation created", OperationCreated, false},
		{"113", Ready, false},
		{"0113", 0, true},
		{"114", 0, true},
		{"", 0, true},
		{"Runnin", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("Parse(%q) error = %v, want ErrInvalid", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	for c, n := range names {
		if got, err := Parse(n); err != nil || got != c {
			t.Errorf("Parse(%q) = %v, %v; want %v", n, got, err, c)
		}
	}
}
