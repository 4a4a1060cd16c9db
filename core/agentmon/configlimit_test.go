package agentmon

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/core/instance"
)

// TestConfigValueAtLimitReachesGuest checks that the largest config value
// the instance service accepts (instance.MaxValueLength bytes, of the
// characters JSON escapes the most) reaches the guest whole through the
// real agent both ways: read with GET /1.0/config/KEY (proxied to the
// daemon's devlxd handlers) and pushed as a config event carrying the old
// and the new value, each at the limit.
func TestConfigValueAtLimitReachesGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	r := startRealAgent(t)
	old := strings.Repeat("&", instance.MaxValueLength)
	value := strings.Repeat("<", instance.MaxValueLength)
	inst := r.insts.update(r.inst.UUID, func(i *instance.Instance) { i.Config["user.big"] = value })

	t.Run("GET /1.0/config/user.big", func(t *testing.T) {
		code, _, body := guestCall(t, r.g.Socket(), "GET", "/1.0/config/user.big", "")
		if code != http.StatusOK || body != value {
			t.Fatalf("GET: %d, %d bytes (want 200 and the %d-byte value)", code, len(body), len(value))
		}
	})

	t.Run("config event", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", r.g.Socket())
		}}}
		defer c.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", "http://lxd/1.0/events?type=config", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /1.0/events: %s", resp.Status)
		}
		// The answer's headers come once the guest is subscribed.
		r.d.svc.ConfigChanged(inst, []instance.ConfigChange{{Key: "user.big", OldValue: old, Value: value}})
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		if !sc.Scan() {
			t.Fatalf("no event: %v; agent log:\n%s", sc.Err(), r.proc.Log())
		}
		var ev struct {
			Type     string `json:"type"`
			Metadata struct {
				Key      string `json:"key"`
				OldValue string `json:"old_value"`
				Value    string `json:"value"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decoding the event: %v", err)
		}
		if ev.Type != "config" || ev.Metadata.Key != "user.big" || ev.Metadata.OldValue != old || ev.Metadata.Value != value {
			t.Fatalf("event %s for %q: old %d bytes, value %d bytes; want both values whole (%d bytes)",
				ev.Type, ev.Metadata.Key, len(ev.Metadata.OldValue), len(ev.Metadata.Value), instance.MaxValueLength)
		}
	})
}
