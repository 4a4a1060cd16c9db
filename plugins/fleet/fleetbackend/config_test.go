package fleetbackend

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  map[string]string
		want    Behaviour
		wantErr bool
	}{
		{"defaults", nil, Behaviour{ReadyAfter: -1, Jitter: 20}, false},
		{"other prefixes ignored", map[string]string{"sim.command": "x", "limits.cpu": "2"}, Behaviour{ReadyAfter: -1, Jitter: 20}, false},
		{"empty means default", map[string]string{KeyBootDelay: "", KeyReadyAfter: " "}, Behaviour{ReadyAfter: -1, Jitter: 20}, false},
		{"all set", map[string]string{
			KeyBootDelay: "1s", KeyReadyAfter: "2s", KeyHeartbeat: "500ms", KeyFlapEvery: "1m", KeyCrashAfter: "1h", KeyJitter: "0",
		}, Behaviour{BootDelay: time.Second, ReadyAfter: 2 * time.Second, Heartbeat: 500 * time.Millisecond, FlapEvery: time.Minute, CrashAfter: time.Hour}, false},
		{"ready at once", map[string]string{KeyReadyAfter: "0s"}, Behaviour{ReadyAfter: 0, Jitter: 20}, false},
		{"ready never", map[string]string{KeyReadyAfter: "never"}, Behaviour{ReadyAfter: -1, Jitter: 20}, false},
		{"unknown key", map[string]string{"fleet.bogus": "1"}, Behaviour{}, true},
		{"bad duration", map[string]string{KeyBootDelay: "soon"}, Behaviour{}, true},
		{"negative duration", map[string]string{KeyCrashAfter: "-1s"}, Behaviour{}, true},
		{"too long", map[string]string{KeyFlapEvery: "25h"}, Behaviour{}, true},
		{"heartbeat too short", map[string]string{KeyHeartbeat: "1ms"}, Behaviour{}, true},
		{"jitter too big", map[string]string{KeyJitter: "91"}, Behaviour{}, true},
		{"jitter not a number", map[string]string{KeyJitter: "lots"}, Behaviour{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.config)
			if tt.wantErr {
				if !errors.Is(err, sdk.ErrInvalid) {
					t.Fatalf("ParseConfig(%v) error = %v, want ErrInvalid", tt.config, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseConfig(%v) = %+v, %v; want %+v", tt.config, got, err, tt.want)
			}
		})
	}
}

func TestJittered(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := Behaviour{Jitter: 20}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := b.jittered(r, 10*time.Second)
		if d < 8*time.Second || d > 12*time.Second {
			t.Fatalf("jittered(10s) = %v, outside ±20%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("jittered drew only %d distinct values of 1000", len(seen))
	}
	if d := (Behaviour{Jitter: 0}).jittered(r, time.Second); d != time.Second {
		t.Fatalf("no jitter: got %v", d)
	}
}
