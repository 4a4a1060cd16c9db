package contract

// DataDirEnv names the environment variable in which the daemon hands every
// plugin process its data directory (<state-dir>/plugins, shared by the
// plugins of one daemon: keep yours in a subdirectory named after the
// plugin, or in per-guest directories with unique names). The directory
// outlives plugin and daemon restarts. Without it (a plugin started by a
// test), pick a default under $XDG_RUNTIME_DIR or the temporary directory.
const DataDirEnv = "GUESTLINK_PLUGIN_DATA_DIR"

// MaxSocketPath is the longest Unix socket path Linux accepts, in bytes
// (sun_path is 108 bytes with the terminating NUL). Socket paths a plugin
// builds under its data directory (VMM control sockets, a hybrid link's
// Path and the daemon's Path+"_"+port beside it) must fit; refuse a guest
// whose paths would not with ErrInvalid at Create.
const MaxSocketPath = 107
