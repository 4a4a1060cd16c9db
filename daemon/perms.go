package daemon

import (
	"fmt"

	"github.com/guestlink/guestlink/plugins/pluginhost"
)

// checkPermissions refuses directories the daemon cannot trust: the state
// directory (keys, the database, the admin socket) and the plugin
// directory (binaries the daemon runs, often as root) must be changeable
// only by the daemon's user or root, and so must every directory above
// them (a sticky one, like /tmp, is fine). The plugin host checks the
// plugin binaries and SHA256SUMS themselves at discovery. The error names
// the path, its mode and owner, and the fix (chmod go-w PATH).
func checkPermissions(cfg Config) error {
	if err := pluginhost.CheckTrusted("state directory", cfg.StateDir); err != nil {
		return fmt.Errorf("refusing the state directory: %w", err)
	}
	if err := pluginhost.CheckTrusted("plugin directory", cfg.PluginDir); err != nil {
		return fmt.Errorf("refusing the plugin directory: %w", err)
	}
	return nil
}
