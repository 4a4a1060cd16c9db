package fleetbackend

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
)

// ConfigPrefix is the prefix of the config keys this backend owns.
const ConfigPrefix = "fleet."

// Config keys (docs/fleet.md). Durations use Go's syntax ("1.5s"); an empty
// value means the default.
const (
	// KeyBootDelay is how long after Start the agent starts (default 0).
	KeyBootDelay = "fleet.boot_delay"
	// KeyReadyAfter is how long after the agent starts the guest declares
	// Ready on its devlxd socket; "never" (the default) leaves it to
	// whoever drives the guest.
	KeyReadyAfter = "fleet.ready_after"
	// KeyHeartbeat is the agent's heartbeat period (default 5s).
	KeyHeartbeat = "fleet.heartbeat"
	// KeyFlapEvery makes a Ready guest declare Started and then Ready again
	// every period (default 0: never).
	KeyFlapEvery = "fleet.flap_every"
	// KeyCrashAfter makes the guest crash this long after Start (default 0:
	// never): its agent dies without a word and the guest stops.
	KeyCrashAfter = "fleet.crash_after"
	// KeyJitter is the jitter applied to every duration above, in percent
	// (0..90, default 20): each guest draws its own values in
	// [d*(1-j), d*(1+j)].
	KeyJitter = "fleet.jitter"
)

// Bounds of the duration keys.
const (
	maxDuration  = 24 * time.Hour
	minHeartbeat = 100 * time.Millisecond
	maxJitter    = 90
)

// Schema declares the fleet.* keys
// (sdk.Info.ConfigSchema): the daemon refuses any other fleet.* key before
// calling Create, and docs/fleet.md's key table is generated from it (go
// run ./internal/genkeys).
var Schema = []sdk.ConfigKey{
	{Name: KeyBootDelay, Type: sdk.ConfigDuration, Default: "`0`", Doc: "time from Start until the agent starts"},
	{Name: KeyReadyAfter, Type: sdk.ConfigDuration, Default: "`never`",
		Doc: "time from the agent's start until the guest's userland declares Ready (`PATCH /1.0` on its devlxd socket, retried with backoff until devlxd takes it); `never` leaves it to whoever drives the guest"},
	{Name: KeyHeartbeat, Type: sdk.ConfigDuration, Default: "agent default (5 s)", Doc: "the agent's heartbeat period; at least 100 ms"},
	{Name: KeyFlapEvery, Type: sdk.ConfigDuration, Default: "`0` (never)",
		Doc: "a Ready guest declares Started, then Ready again a quarter period later, every period"},
	{Name: KeyCrashAfter, Type: sdk.ConfigDuration, Default: "`0` (never)",
		Doc: "the guest crashes this long after Start: its agent dies without a word, the guest stops with `crashed`"},
	{Name: KeyJitter, Type: sdk.ConfigInt, Default: "`20`", Doc: "jitter of every duration above, in percent (0..90)"},
}

// knownKeys are the declared keys' names, for error messages.
var knownKeys = func() []string {
	names := make([]string, len(Schema))
	for i, k := range Schema {
		names[i] = k.Name
	}
	return names
}()

// Behaviour is a guest's parsed configuration, before jitter.
type Behaviour struct {
	BootDelay  time.Duration
	ReadyAfter time.Duration // negative: never
	Heartbeat  time.Duration // 0: the agent's default
	FlapEvery  time.Duration
	CrashAfter time.Duration
	Jitter     int // percent
}

// ParseConfig validates the fleet.* keys of config; keys of other prefixes
// are ignored. An unknown fleet.* key or a bad value is sdk.ErrInvalid.
func ParseConfig(config map[string]string) (Behaviour, error) {
	b := Behaviour{ReadyAfter: -1, Jitter: 20}
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := strings.TrimSpace(config[k])
		if !strings.HasPrefix(k, ConfigPrefix) || v == "" {
			continue
		}
		var err error
		switch k {
		case KeyBootDelay:
			b.BootDelay, err = parseDuration(v, 0)
		case KeyReadyAfter:
			if v == "never" {
				b.ReadyAfter = -1
			} else {
				b.ReadyAfter, err = parseDuration(v, 0)
			}
		case KeyHeartbeat:
			b.Heartbeat, err = parseDuration(v, minHeartbeat)
		case KeyFlapEvery:
			b.FlapEvery, err = parseDuration(v, 0)
		case KeyCrashAfter:
			b.CrashAfter, err = parseDuration(v, 0)
		case KeyJitter:
			var n int
			n, err = strconv.Atoi(v)
			if err == nil && (n < 0 || n > maxJitter) {
				err = fmt.Errorf("%d is outside 0..%d", n, maxJitter)
			}
			b.Jitter = n
		default:
			return Behaviour{}, fmt.Errorf("unknown config key %q (known: %s): %w", k, strings.Join(knownKeys, ", "), sdk.ErrInvalid)
		}
		if err != nil {
			return Behaviour{}, fmt.Errorf("config key %s=%q: %v: %w", k, v, err, sdk.ErrInvalid)
		}
	}
	return b, nil
}

func parseDuration(v string, min time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 || d > maxDuration {
		return 0, fmt.Errorf("%s is outside 0..%s", d, maxDuration)
	}
	if d != 0 && d < min {
		return 0, fmt.Errorf("%s is below the minimum %s", d, min)
	}
	return d, nil
}

// jittered returns d moved by a random amount within ±Jitter percent.
func (b Behaviour) jittered(r *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 || b.Jitter == 0 {
		return d
	}
	f := 1 + (r.Float64()*2-1)*float64(b.Jitter)/100
	return time.Duration(float64(d) * f)
}
