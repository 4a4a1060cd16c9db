package simbackend

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/ringbuffer"
	"github.com/guestlink/guestlink/plugins/sim/simvm"
)

// ConfigPrefix is the prefix of the instance config keys this backend owns.
const ConfigPrefix = "sim."

// Instance config keys.
const (
	// KeyCommand is the guest command, run with /bin/sh -c (default
	// DefaultCommand).
	KeyCommand = "sim.command"
	// KeyLayout is the serial layout: "current" (default) or "legacy".
	KeyLayout = "sim.layout"
	// KeyRingSize is the ring buffer size in bytes, a power of two
	// (default DefaultRingSize, like LXD).
	KeyRingSize = "sim.ring_size"
	// KeyAgent is the path of the guestlink-agent binary (default: next to
	// the plugin's parent directory, bin/plugins/sim -> bin/guestlink-agent).
	KeyAgent = "sim.agent"
	// KeyLink is the guest link: "hybrid" (default: the hybrid vsock
	// socket) or "serial" (link/serialmux over a virtio-serial port, as
	// QEMU's serial link).
	KeyLink = "sim.link"
)

// Defaults of the config keys.
const (
	DefaultCommand  = `exec "$GUESTLINK_AGENT" run`
	DefaultLayout   = simvm.LayoutCurrent
	DefaultRingSize = 16
)

// Schema declares the sim.* keys (sdk.Info.ConfigSchema): the daemon
// refuses any other sim.* key before calling Create, and docs/sim.md's
// key table is generated from it (go run ./internal/genkeys).
var Schema = []sdk.ConfigKey{
	{Name: KeyCommand, Type: sdk.ConfigString, Default: "`" + DefaultCommand + "`",
		Doc: "guest command, run with `/bin/sh -c` in `<guestdir>/rootfs`"},
	{Name: KeyLayout, Type: sdk.ConfigEnum, Default: "`current`",
		Doc: "`current`: `com.canonical.lxd` wired to the ring + unwired `org.linuxcontainers.lxd`; `legacy`: only `org.linuxcontainers.lxd`, wired"},
	{Name: KeyRingSize, Type: sdk.ConfigInt, Default: "`16`",
		Doc: "ring buffer bytes; a power of two, 1 .. 16777216 (LXD uses 16)"},
	{Name: KeyAgent, Type: sdk.ConfigPath, Default: "`$GUESTLINK_PLUGIN_AGENT`, else `<dir of plugin's dir>/guestlink-agent` (`bin/plugins/sim` -> `bin/guestlink-agent`; `sdk.AgentPath`)",
		Doc: "absolute path of the agent; with the default command, Start fails with `ErrInvalid` if it is missing"},
	{Name: KeyLink, Type: sdk.ConfigEnum, Default: "`hybrid`",
		Doc: "the guest link: `hybrid` (the hybrid vsock socket `link.sock`) or `serial` (`link/serialmux` over the virtio-serial port `com.canonical.lxd.link`, as QEMU's serial link: the port is the slave of a pseudo-terminal in raw mode, which the VMM relays to `serial.sock`, one client at a time, as QEMU's socket chardev; the agent gets `GUESTLINK_AGENT_LINK=serial:com.canonical.lxd.link`)"},
}

// knownKeys are the declared keys' names, sorted, for error messages.
var knownKeys = func() []string {
	var names []string
	for _, k := range Schema {
		names = append(names, k.Name)
	}
	sort.Strings(names)
	return names
}()

// guestConfig is a guest's parsed sim.* configuration.
type guestConfig struct {
	Command  string
	Layout   simvm.Layout
	RingSize int
	Agent    string // empty: the backend's default
	Link     string // "" (hybrid) or simvm.LinkSerial
}

// parseConfig reads the sim.* keys of cfg, ignoring the keys of other
// prefixes. Unknown sim.* keys and invalid values are sdk.ErrInvalid.
func parseConfig(cfg map[string]string) (*guestConfig, error) {
	gc := &guestConfig{Command: DefaultCommand, Layout: DefaultLayout, RingSize: DefaultRingSize}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the first bad key deterministically
	for _, k := range keys {
		if !strings.HasPrefix(k, ConfigPrefix) {
			continue
		}
		v := cfg[k]
		switch k {
		case KeyCommand:
			if strings.TrimSpace(v) != "" {
				gc.Command = v
			}
		case KeyLayout:
			if v != "" {
				gc.Layout = simvm.Layout(v)
			}
			if !gc.Layout.Valid() {
				return nil, fmt.Errorf("config key %s: unknown layout %q (want %q or %q): %w",
					k, v, simvm.LayoutCurrent, simvm.LayoutLegacy, sdk.ErrInvalid)
			}
		case KeyRingSize:
			if v == "" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("config key %s: %q is not a number: %w", k, v, sdk.ErrInvalid)
			}
			if _, err := ringbuffer.New(n); err != nil {
				if errors.Is(err, ringbuffer.ErrSize) {
					return nil, fmt.Errorf("config key %s: %w: %w", k, err, sdk.ErrInvalid)
				}
				return nil, fmt.Errorf("config key %s: %w", k, err)
			}
			gc.RingSize = n
		case KeyLink:
			switch v {
			case "", simvm.LinkHybrid:
				gc.Link = ""
			case simvm.LinkSerial:
				gc.Link = simvm.LinkSerial
			default:
				return nil, fmt.Errorf("config key %s: unknown link %q (want %q or %q): %w",
					k, v, simvm.LinkHybrid, simvm.LinkSerial, sdk.ErrInvalid)
			}
		case KeyAgent:
			if v != "" && !strings.HasPrefix(v, "/") {
				return nil, fmt.Errorf("config key %s: agent path %q is not absolute: %w", k, v, sdk.ErrInvalid)
			}
			gc.Agent = v
		default:
			return nil, fmt.Errorf("unknown config key %q (known: %s): %w", k, strings.Join(knownKeys, ", "), sdk.ErrInvalid)
		}
	}
	return gc, nil
}
