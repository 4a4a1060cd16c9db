package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Configuration of the CLI's remotes.
const (
	// EnvConfigDir names the environment variable giving the CLI's
	// configuration directory (default ~/.config/guestlink).
	EnvConfigDir = "GUESTLINK_CONFIG_DIR"
	// LocalRemote is the built-in remote: the admin socket of --state-dir.
	LocalRemote = "local"
	// Files in the configuration directory.
	RemotesFile    = "remotes.json"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)

// Remote is one daemon the CLI can talk to over TCP.
type Remote struct {
	URL         string `json:"url"`
	Fingerprint string `json:"fingerprint,omitempty"` // pinned server certificate (https)
	Token       string `json:"token,omitempty"`       // bearer token
}

// remotesConfig is RemotesFile: the remotes and the switched one.
type remotesConfig struct {
	Current string            `json:"current,omitempty"`
	Remotes map[string]Remote `json:"remotes"`
}

// configDir returns the CLI's configuration directory.
func configDir() (string, error) {
	if d := os.Getenv(EnvConfigDir); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the configuration directory (set %s): %w", EnvConfigDir, err)
	}
	return filepath.Join(d, "guestlink"), nil
}

// loadRemotes reads RemotesFile (empty if it does not exist).
func loadRemotes() (*remotesConfig, string, error) {
	dir, err := configDir()
	if err != nil {
		return nil, "", err
	}
	cfg := &remotesConfig{Remotes: map[string]Remote{}}
	path := filepath.Join(dir, RemotesFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cfg, dir, nil
	case err != nil:
		return nil, "", fmt.Errorf("reading remotes: %w", err)
	}
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, "", fmt.Errorf("reading remotes %s: %w", path, err)
	}
	if cfg.Remotes == nil {
		cfg.Remotes = map[string]Remote{}
	}
	return cfg, dir, nil
}

// save writes RemotesFile (0600: it holds tokens) atomically.
func (c *remotesConfig) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding remotes: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, RemotesFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving remotes: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file of the
// given mode in the same directory.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
