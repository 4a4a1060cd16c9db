package devlxd

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guestlink/guestlink/agent/upstream"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/internal/testenv"
	"github.com/guestlink/guestlink/link/advert"
)

// TestSessionTicketsAcrossRestart checks tickets kept across a daemon
// restart (Config.TicketKeysFile): a new server on the same keys' file
// resumes A's session as A (A's configuration, A's certificate checked per
// request); A's ticket on B's link of the restarted server resumes nothing
// and never answers as A; and the file holds the keys with mode 0600.
func TestSessionTicketsAcrossRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), TicketKeysFile)
	e := newEnv(t, func(c *Config) { c.TicketKeysFile = file })
	a, b := e.agents["a"], e.agents["b"]
	fooA, fooB := sync200(`"bar"`), sync200(`"b-secret"`)
	unauthorized := fail(401, "Unauthorized")

	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys' file has mode %04o, want 0600", fi.Mode().Perm())
	}

	// Tickets from the first server, before its restart.
	aTickets := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
	if got, resumed := aTickets.get(t, uuidA, a, "/1.0/config/user.foo"); got != fooA || resumed {
		t.Fatalf("A on the first server: %+v resumed %v", got, resumed)
	}
	// Two other holders of A's tickets, one per attempt on B's link (each
	// attempt replaces the ticket in its cache).
	thief1 := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
	thief1.get(t, uuidA, a, "/1.0/config/user.foo")
	thief2 := &ticketClient{e: e, cache: tls.NewLRUClientSessionCache(8)}
	thief2.get(t, uuidA, a, "/1.0/config/user.foo")
	if err := e.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The restarted server: the same daemon certificate and keys' file.
	e2 := newEnv(t, func(c *Config) {
		c.Certificate = e.daemon.TLS
		c.Certs = fakeCerts{"a": a.DER, "b": b.DER}
		c.TicketKeysFile = file
	})
	for _, s := range []struct {
		name        string
		tc          *ticketClient
		link        string
		cert        bool
		certOf      string
		wantResumed bool
		want        answer
	}{
		{"A's ticket resumes as A on the restarted server", aTickets, uuidA, true, "a", true, fooA},
		{"A's ticket alone (no certificate) is A's session", aTickets, uuidA, false, "", true, fooA},
		// The same ticket on B's link, with no certificate or with B's:
		// the binding (B's instance) does not open it.
		{"A's ticket on B's link, no certificate", thief1, uuidB, false, "", false, unauthorized},
		{"A's ticket on B's link with B's certificate", thief2, uuidB, true, "b", false, fooB},
		// thief2's cache now holds B's fresh ticket (with B's
		// certificate): on A's link it resumes nothing.
		{"B's new ticket on A's link", thief2, uuidA, false, "", false, unauthorized},
	} {
		s.tc.e = e2
		cert := e.agents[s.certOf]
		if !s.cert {
			cert = nil
		}
		got, resumed := s.tc.get(t, s.link, cert, "/1.0/config/user.foo")
		if resumed != s.wantResumed || got != s.want {
			t.Errorf("%s: %+v resumed %v, want %+v resumed %v", s.name, got, resumed, s.want, s.wantResumed)
		}
	}
}

// TestTicketKeysFile checks what restore takes from the keys' file: keys
// of a file only its owner may read and write, that may still be used;
// never those of a file group or others may read or write (replaced by
// fresh keys with mode 0600), a key two periods old or from the future,
// garbage or a key of the wrong size. Each case seals a ticket with the
// keys as written, then restores a second ticketKeys from the file at a
// later time and tries to open it.
func TestTicketKeysFile(t *testing.T) {
	const period = time.Hour
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	binding := []byte(ticketBindingPrefix + uuidA)
	state := []byte("a session state")
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		later   time.Duration                   // restore's clock after the file's newest key
		edit    func(t *testing.T, path string) // changes the file before the restore
		opens   bool                            // the ticket sealed before opens after
		seals   bool                            // the restored newest key still seals (no rotation)
		wantErr string
	}{
		{name: "0600, same period", mode: 0o600, later: 30 * time.Minute, opens: true, seals: true},
		{name: "0400, same period", mode: 0o400, later: 30 * time.Minute, opens: true, seals: true},
		{name: "0600, next period: opens, fresh key seals", mode: 0o600, later: 90 * time.Minute, opens: true},
		{name: "0600, two periods on: expired, not used", mode: 0o600, later: 2 * period},
		{name: "0600, key from the future: not used", mode: 0o600, later: -time.Minute},
		{name: "group readable 0640", mode: 0o640, later: time.Minute, wantErr: "readable or writable by group or others (mode 0640)"},
		{name: "world readable 0604", mode: 0o604, later: time.Minute, wantErr: "(mode 0604)"},
		{name: "group writable 0620", mode: 0o620, later: time.Minute, wantErr: "(mode 0620)"},
		{name: "a symbolic link", mode: 0o600, later: time.Minute, wantErr: "session ticket keys", edit: func(t *testing.T, path string) {
			moved := path + ".real"
			if err := os.Rename(path, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "owned by another user", mode: 0o600, later: time.Minute, wantErr: "owned by uid 54321", edit: func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				testenv.Requires(t, "root", "only root gives a file to another user (chown)")
			}
			if err := os.Chown(path, 54321, 54321); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "garbage", mode: 0o600, later: time.Minute, wantErr: "invalid character", edit: func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a 16-byte key", mode: 0o600, later: time.Minute, wantErr: "a key of 16 bytes", edit: func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(`{"keys":[{"created":"2026-11-28T10:00:00Z","key":"AAAAAAAAAAAAAAAAAAAAAA=="}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), TicketKeysFile)
			now := t0
			first := &ticketKeys{file: path, period: period, now: func() time.Time { return now }}
			if _, err := first.restore(); err != nil {
				t.Fatal(err)
			}
			ticket, err := first.seal(state, binding)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(t, path)
			}
			now = t0.Add(tc.later)
			second := &ticketKeys{file: path, period: period, now: func() time.Time { return now }}
			next, err := second.restore()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("restore: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("restore: error %v, want one containing %q", err, tc.wantErr)
			}
			if got := second.open(ticket, binding); tc.opens != bytes.Equal(got, state) {
				t.Errorf("the ticket sealed before opens: %v, want %v", got != nil, tc.opens)
			}
			if seals := bytes.Equal(second.set.Load().cur.raw, first.set.Load().cur.raw); seals != tc.seals {
				t.Errorf("the restored key seals: %v, want %v", seals, tc.seals)
			}
			wantNext := now.Add(period)
			if tc.seals {
				wantNext = t0.Add(period) // the schedule goes on, not restarted
			}
			if !next.Equal(wantNext) {
				t.Errorf("next rotation at %v, want %v", next, wantNext)
			}
			// A refused file, or one whose keys rotated, is written anew
			// with mode 0600, and its keys restore.
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if rewritten := tc.wantErr != "" || !tc.seals; rewritten && (!fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600) {
				t.Errorf("keys' file after the restore: %v, want a regular file with mode 0600", fi.Mode())
			}
			third := &ticketKeys{file: path, period: period, now: func() time.Time { return now }}
			if _, err := third.restore(); err != nil {
				t.Errorf("restoring the rewritten file: %v", err)
			}
			if !bytes.Equal(third.set.Load().cur.raw, second.set.Load().cur.raw) {
				t.Error("the keys restored from the rewritten file are not the ones written")
			}
		})
	}
}

// TestTicketKeyExpiresWhileRunning checks that a key is not used past its
// two periods even when no rotation removed it (a daemon whose rotation
// timer has not fired yet): open checks each key's age.
func TestTicketKeyExpiresWhileRunning(t *testing.T) {
	const period = time.Hour
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	k := &ticketKeys{period: period, now: func() time.Time { return now }}
	if err := k.rotate(); err != nil {
		t.Fatal(err)
	}
	binding := []byte(ticketBindingPrefix + uuidA)
	ticket, err := k.seal([]byte("state"), binding)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		later time.Duration
		opens bool
	}{{0, true}, {2*period - time.Second, true}, {2 * period, false}, {-time.Second, false}} {
		now = now.Add(c.later)
		if got := k.open(ticket, binding) != nil; got != c.opens {
			t.Errorf("%v after the key became current: opens %v, want %v", c.later, got, c.opens)
		}
		now = now.Add(-c.later)
	}
}

// portLink is a guest link that dials the socket of each advertised port.
type portLink map[uint32]string

func (l portLink) Dial(ctx context.Context, _, port uint32) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", l[port])
}

func (portLink) Kind() string { return "hybrid" }

func (portLink) Listen(uint32) (net.Listener, error) {
	return nil, errors.New("portLink: no listening")
}

// TestAgentResumesAfterRestart checks the re-advertisement of a restarted
// daemon with the agent's own client (agent/upstream): advertised a new
// port with the same daemon certificate, the agent's probe resumes the
// session of its probe of the previous daemon (kept ticket keys on the
// daemon, the kept session cache on the agent), as A; advertised another
// daemon certificate, the agent offers no ticket of the previous one, even
// to a server that would open it (one holding the same keys).
func TestAgentResumesAfterRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), TicketKeysFile)
	e := newEnv(t, func(c *Config) { c.TicketKeysFile = file })
	a := e.agents["a"]
	link := portLink{8443: e.socks[uuidA]}
	up := upstream.New(upstream.Options{Link: link, Certificate: a.TLS})
	t.Cleanup(up.CloseIdleConnections)
	advertise := func(port uint32, daemon *pki.Pair) {
		t.Helper()
		if err := up.SetAdvertisement(&advert.Advertisement{CID: 2, Port: port, Certificate: string(daemon.CertPEM), Devlxd: true}); err != nil {
			t.Fatal(err)
		}
	}
	advertise(8443, e.daemon)
	if err := up.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	up.CloseIdleConnections()
	if err := e.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The restarted daemon: its certificate, its keys' file, a new port.
	e2 := newEnv(t, func(c *Config) {
		c.Certificate = e.daemon.TLS
		c.Certs = fakeCerts{"a": a.DER}
		c.TicketKeysFile = file
	})
	link[8444] = e2.socks[uuidA]
	advertise(8444, e.daemon)
	env, err := up.Do(t.Context(), "GET", "/1.0/config/user.foo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(env.Metadata); got != `"bar"` {
		t.Errorf("A's resumed request on the restarted daemon answered %s, want A's \"bar\"", got)
	}
	if n := e2.srv.tickets.opened.Load(); n != 1 {
		t.Errorf("the restarted daemon resumed %d sessions, want the agent's 1", n)
	}
	up.CloseIdleConnections()

	// Another daemon certificate on another port, the same ticket keys:
	// had the agent offered its ticket, this server would resume it.
	other, err := pki.GeneratePair("guestlink", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e3 := newEnv(t, func(c *Config) {
		c.Certificate = other.TLS
		c.Certs = fakeCerts{"a": a.DER}
		c.TicketKeysFile = file
	})
	link[8445] = e3.socks[uuidA]
	advertise(8445, other)
	if _, err := up.Do(t.Context(), "GET", "/1.0", nil); err != nil {
		t.Fatal(err)
	}
	if n := e3.srv.tickets.opened.Load(); n != 0 {
		t.Errorf("a daemon of another certificate resumed %d of the agent's sessions, want 0", n)
	}
}
