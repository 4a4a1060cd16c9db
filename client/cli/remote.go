package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/guestlink/guestlink/client"
	"github.com/guestlink/guestlink/errdefs"
)

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

// resolve names the daemon the session talks to, in this order: the
// --remote flag; else an explicit --state-dir, else GUESTLINK_STATE_DIR
// (both the local socket of that state directory, whatever remote is
// switched); else the remote chosen with remote switch; else local. It
// returns a remote's name, LocalRemote for the admin socket.
func (s *session) resolve(cfg *remotesConfig) string {
	switch {
	case s.remote != "":
		return s.remote
	case s.stateDirSet, s.stateDir != "":
		return LocalRemote
	case cfg.Current != "":
		return cfg.Current
	}
	return LocalRemote
}

// connect makes the session's client: the daemon resolve names, over TCP
// for a remote, else the admin socket of --state-dir.
func (s *session) connect() error {
	cfg, dir, err := loadRemotes()
	if err != nil {
		return err
	}
	name := s.resolve(cfg)
	if name == LocalRemote {
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
		Short: "Manage the daemons the CLI talks to over TCP (remote switch local: back to the admin socket)",
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
	var fingerprint string
	var accept bool
	tokenFlag := secretFlag{name: "token"}
	cmd := &cobra.Command{
		Use:   "add NAME URL",
		Short: "Add a remote daemon (https://HOST:PORT with a client certificate, or http(s) with a bearer token)",
		Long: "Add a remote daemon. Over https the CLI presents its own client certificate (created once in " +
			"the configuration directory; the admin trusts it with guestlink config trust add) and pins the " +
			"daemon's certificate: give --fingerprint, or check the one printed and rerun with --accept-certificate. " +
			"A bearer token works over http and https: give it as --token-file PATH or --token - (one line of stdin), " +
			"not as --token VALUE, which every local user can read in ps.",
		Example: "  (umask 077; guestlink auth identity token issue bearer/ci > ci.token)   # on the daemon's host\n" +
			"  guestlink remote add ci http://127.0.0.1:8080 --token-file ci.token\n" +
			"  printf '%s\\n' \"$TOKEN\" | guestlink remote add ci http://127.0.0.1:8080 --token -",
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
			token, err := tokenFlag.read(cmd)
			if err != nil {
				return err
			}
			r := Remote{URL: u.Scheme + "://" + u.Host, Token: token}
			out := cmd.OutOrStdout()
			if u.Scheme == "http" {
				if token == "" {
					return fmt.Errorf("an http remote needs a token, --token-file PATH or --token - (client certificates need https): %w", errdefs.ErrInvalid)
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
	tokenFlag.add(cmd, "bearer token (from guestlink auth identity token issue)")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "SHA-256 fingerprint of the daemon's https certificate")
	cmd.Flags().BoolVar(&accept, "accept-certificate", false, "trust the certificate the daemon presents now (first contact)")
	return cmd
}

func (s *session) remoteListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the remotes; CURRENT * marks the one commands talk to now",
		Long: "List the remotes. CURRENT is * for the daemon a command run the same way would talk to (--remote, " +
			"else --state-dir or " + EnvStateDir + " for local, else the switched remote), and \"switched\" for " +
			"the remote chosen with guestlink remote switch when something else beats it. In --format json, " +
			"current and switched are fields of every remote.",
		Args: argsExactly(0),
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
				Current     bool   `json:"current"`  // the daemon commands talk to now
				Switched    bool   `json:"switched"` // chosen with remote switch
			}
			current := s.resolve(cfg)
			switched := cfg.Current
			if switched == "" {
				switched = LocalRemote
			}
			list := []item{{Name: LocalRemote, URL: "unix://" + filepath.Join(s.stateDir, SocketName), Auth: "unix",
				Current: current == LocalRemote, Switched: switched == LocalRemote}}
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
				list = append(list, item{Name: n, URL: r.URL, Auth: a, Fingerprint: r.Fingerprint, Current: current == n, Switched: switched == n})
			}
			return s.render(list, func(w io.Writer) error {
				row(w, "NAME", "URL", "AUTH", "FINGERPRINT", "CURRENT")
				for _, it := range list {
					cur := ""
					switch {
					case it.Current:
						cur = "*"
					case it.Switched:
						cur = "switched"
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
		Use:   "switch NAME|local",
		Short: "Make NAME the default remote; guestlink remote switch local goes back to the admin socket",
		Long: "Make NAME the default remote of this user (saved in the configuration directory). It is the " +
			"default only: --remote NAME, --state-dir DIR and " + EnvStateDir + " still win, so make run, make " +
			"stop and scripts that name their state directory act on their local daemon. " +
			"guestlink remote switch local goes back to the admin socket of --state-dir.",
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			if err := cfg.save(dir); err != nil {
				return err
			}
			if name == LocalRemote {
				fmt.Fprintln(cmd.OutOrStdout(), "Default remote: local (the admin socket of --state-dir or "+EnvStateDir+").")
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "Default remote: %s (--state-dir and %s still mean the local daemon; guestlink remote switch local goes back).\n", name, EnvStateDir)
			}
			return nil
		},
	}
}
