package api

// BackendInstall is the body of POST /1.0/backends: install the plugin
// binary at Path (a file on the daemon's machine, read by the daemon) into
// the plugin directory as Name (default: the file's name), write its
// checksum into SHA256SUMS and start it, or restart it on the new binary.
// The answer is the Backend once the new process runs or failed to start.
type BackendInstall struct {
	Path string `json:"path"`
	Name string `json:"name,omitempty"`
}
