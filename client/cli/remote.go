package cli

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
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

// clientPair loads the CLI's client key pair, creating it (key 0600) the
// first time; it returns the pair and the certificate's path.
func clientPair(dir string) (*tls.Certificate, string, error) {
	certPath, keyPath := filepath.Join(dir, ClientCertFile), filepath.Join(dir, ClientKeyFile)
	_, cerr := os.Stat(certPath)
	_, kerr := os.Stat(keyPath)
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		if err := writeClientPair(dir, certPath, keyPath); err != nil {
			return nil, "", fmt.Errorf("creating the client certificate: %w", err)
		}
	case cerr != nil || kerr != nil:
		return nil, "", fmt.Errorf("client certificate %s and key %s: both or neither must exist: %w", certPath, keyPath, errors.Join(cerr, kerr))
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, "", fmt.Errorf("loading the client certificate %s: %w", certPath, err)
	}
	return &pair, certPath, nil
}

// clientName is the common name of a new client certificate: "user-host"
// in the grammar of identity names, so the daemon can use it as the
// certificate's default name.
func clientName() string {
	var parts []string
	if u, err := user.Current(); err == nil {
		parts = append(parts, u.Username)
	}
	if h, err := os.Hostname(); err == nil {
		parts = append(parts, strings.Split(h, ".")[0])
	}
	var b strings.Builder
	for _, r := range strings.Join(parts, "-") {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-0123456789")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	if name == "" {
		return "guestlink-client"
	}
	return name
}

// writeClientPair creates an ECDSA P-256 self-signed client certificate.
func writeClientPair(dir, certPath, keyPath string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: clientName(), Organization: []string{"guestlink"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// interactive reports whether the command reads a terminal.
func interactive(cmd *cobra.Command) bool {
	f, ok := cmd.InOrStdin().(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// askAccept shows the daemon's fingerprint and asks whether to trust it.
func askAccept(cmd *cobra.Command, url, fp string) bool {
	fmt.Fprintf(cmd.ErrOrStderr(), "Certificate fingerprint of %s: %s\nCompare it with the one guestlinkd logs at start. Accept it? (y/N): ", url, fp)
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// validRemoteName checks a remote's name: a DNS label, not "local".
func validRemoteName(name string) error {
	ok := name != "" && len(name) <= 63 && name[0] != '-' && name[len(name)-1] != '-' && (name[0] < '0' || name[0] > '9')
	for _, r := range name {
		if r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("invalid remote name %q: letters, digits and hyphens, 1 to 63, starting with a letter: %w", name, errdefs.ErrInvalid)
	}
	if name == LocalRemote {
		return fmt.Errorf("remote name %q is reserved for the local admin socket: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

// connect makes the session's client: the --remote (or the switched
// remote) over TCP, else the admin socket of --state-dir.
func (s *session) connect() error {
	name := s.remote
	cfg, dir, err := loadRemotes()
	if err != nil {
		return err
	}
	if name == "" {
		name = cfg.Current
	}
	if name == "" || name == LocalRemote {
		if s.stateDir == "" {
			return errors.New("no state directory: give --state-dir DIR or set " + EnvStateDir + "")
		}
		c, err := client.New(filepath.Join(s.stateDir, SocketName))
		if err != nil {
			return err
		}
		s.client = c
		return nil
	}
	r, ok := cfg.Remotes[name]
	if !ok {
		return fmt.Errorf("no remote %q: see guestlink remote list: %w", name, errdefs.ErrNotFound)
	}
	opts := client.Options{Token: r.Token, ServerFingerprint: r.Fingerprint}
	if strings.HasPrefix(r.URL, "https://") {
		pair, _, err := clientPair(dir)
		if err != nil {
			return err
		}
		opts.Certificate = pair
	}
	c, err := client.NewWithOptions(r.URL, opts)
	if err != nil {
		return fmt.Errorf("remote %q: %w", name, err)
	}
	s.client = c
	return nil
}

// remoteCommand is "guestlink remote": the daemons reachable over TCP.
func (s *session) remoteCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remote",
		Short: "Manage the daemons the CLI talks to over TCP",
		Annotations: map[string]string{
			noClient: "true",
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown remote subcommand %q: use add, list, remove or switch", args[0])
			}
			return fmt.Errorf("missing remote subcommand: add, list, remove or switch")
		},
	}
	cmd.AddCommand(s.remoteAddCommand(), s.remoteListCommand(), s.remoteRemoveCommand(), s.remoteSwitchCommand())
	return cmd
}

// noClient annotates commands that run without a daemon.
const noClient = "guestlink.no-client"

func (s *session) remoteAddCommand() *cobra.Command {
	var token, fingerprint string
	var accept bool
	cmd := &cobra.Command{
		Use:   "add NAME URL",
		Short: "Add a remote daemon (https://HOST:PORT with a client certificate, or http(s) with --token)",
		Long: "Add a remote daemon. Over https the CLI presents its own client certificate (created once in " +
			"the configuration directory; the admin trusts it with guestlink config trust add) and pins the " +
			"daemon's certificate: give --fingerprint, or check the one printed and rerun with --accept-certificate. " +
			"A bearer token (--token) works over http and https.",
		Args: argsExactly(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, raw := args[0], args[1]
			if err := validRemoteName(name); err != nil {
				return err
			}
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
				return fmt.Errorf("invalid remote URL %q: want https://HOST:PORT or http://HOST:PORT: %w", raw, errdefs.ErrInvalid)
			}
			cfg, dir, err := loadRemotes()
			if err != nil {
				return err
			}
			if _, ok := cfg.Remotes[name]; ok {
				return fmt.Errorf("remote %q exists: remove it first: %w", name, errdefs.ErrAlreadyExists)
			}
			r := Remote{URL: u.Scheme + "://" + u.Host, Token: token}
			out := cmd.OutOrStdout()
			if u.Scheme == "http" {
				if token == "" {
					return fmt.Errorf("an http remote needs --token (client certificates need https): %w", errdefs.ErrInvalid)
				}
				if fingerprint != "" {
					return fmt.Errorf("--fingerprint pins an https certificate; %s is http: %w", raw, errdefs.ErrInvalid)
				}
			} else {
				if fingerprint != "" {
					if r.Fingerprint, err = client.NormalizeFingerprint(fingerprint); err != nil {
						return err
					}
				} else {
					cert, err := client.ServerCertificate(cmd.Context(), r.URL)
					if err != nil {
						return err
					}
					fp := client.Fingerprint(cert)
					if !accept && interactive(cmd) {
						accept = askAccept(cmd, r.URL, fp)
					}
					if !accept {
						return fmt.Errorf("the certificate of %s has fingerprint %s: check it against the one guestlinkd logs at start, then rerun with --accept-certificate or --fingerprint %s", r.URL, fp, fp)
					}
					fmt.Fprintf(out, "Certificate fingerprint: %s (accepted)\n", fp)
					r.Fingerprint = fp
				}
			}
			_, certPath, err := clientPair(dir)
			if err != nil {
				return err
			}
			cfg.Remotes[name] = r
			if err := cfg.save(dir); err != nil {
				return err
			}
			fmt.Fprintf(out, "Remote %q added (%s).\n", name, r.URL)
			fmt.Fprintf(out, "Client certificate: %s\n", certPath)
			if token == "" {
				fmt.Fprintf(out, "To be trusted, an admin runs on the daemon's host: guestlink config trust add %s\n", certPath)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "bearer token (from guestlink auth identity token issue)")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "SHA-256 fingerprint of the daemon's https certificate")
	cmd.Flags().BoolVar(&accept, "accept-certificate", false, "trust the certificate the daemon presents now (first contact)")
	return cmd
}

func (s *session) remoteListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the remotes",
		Args:  argsExactly(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			cfg, _, err := loadRemotes()
			if err != nil {
				return err
			}
			type item struct {
				Name        string `json:"name"`
				URL         string `json:"url"`
				Auth        string `json:"auth"`
				Fingerprint string `json:"fingerprint,omitempty"`
				Current     bool   `json:"current"`
			}
			current := cfg.Current
			if current == "" {
				current = LocalRemote
			}
			list := []item{{Name: LocalRemote, URL: "unix://" + filepath.Join(s.stateDir, SocketName), Auth: "unix", Current: current == LocalRemote}}
			names := make([]string, 0, len(cfg.Remotes))
			for n := range cfg.Remotes {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				r := cfg.Remotes[n]
				a := "tls"
				if r.Token != "" {
					a = "bearer"
				}
				list = append(list, item{Name: n, URL: r.URL, Auth: a, Fingerprint: r.Fingerprint, Current: current == n})
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "URL", "AUTH", "FINGERPRINT", "CURRENT")
				for _, it := range list {
					cur := ""
					if it.Current {
						cur = "*"
					}
					fp := it.Fingerprint
					if len(fp) > 16 {
						fp = fp[:16]
					}
					row(w, it.Name, it.URL, it.Auth, fp, cur)
				}
				return nil
			})
		},
	}
}

func (s *session) remoteRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a remote",
		Args:  argsExactly(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, dir, err := loadRemotes()
			if err != nil {
				return err
			}
			if _, ok := cfg.Remotes[args[0]]; !ok {
				return fmt.Errorf("no remote %q: %w", args[0], errdefs.ErrNotFound)
			}
			delete(cfg.Remotes, args[0])
			if cfg.Current == args[0] {
				cfg.Current = ""
			}
			return cfg.save(dir)
		},
	}
}

func (s *session) remoteSwitchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "switch NAME",
		Short: "Make NAME the default remote (local: the admin socket)",
		Args:  argsExactly(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, dir, err := loadRemotes()
			if err != nil {
				return err
			}
			name := args[0]
			if name != LocalRemote {
				if _, ok := cfg.Remotes[name]; !ok {
					return fmt.Errorf("no remote %q: %w", name, errdefs.ErrNotFound)
				}
			}
			cfg.Current = name
			if name == LocalRemote {
				cfg.Current = ""
			}
			return cfg.save(dir)
		},
	}
}
