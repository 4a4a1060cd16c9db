// Package cluster makes guestlink daemons that share one PostgreSQL
// database members of one cluster: it bootstraps the cluster (its CA and
// the first member), admits members with one-time join tokens, keeps each
// member's heartbeat in the database, says which members are offline,
// places new instances and gives the mutual-TLS configuration members use
// to talk to each other (forwarded requests, the cluster-wide list).
//
// A daemon on PostgreSQL is always a member (a cluster of one when it has
// no --cluster-address), so that a second daemon started on the same
// database without joining is refused instead of adopting the first one's
// instances. A daemon on SQLite is never in a cluster.
package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/errdefs"
)

// Defaults of Config.
const (
	DefaultHeartbeat    = 3 * time.Second
	DefaultOfflineAfter = 12 * time.Second
	// TokenExpiry is how long a join token stays valid.
	TokenExpiry = 3 * time.Hour
	// JoinPath is the cluster listener's route a joining daemon presents
	// its token to (the only route served without a member certificate).
	JoinPath = "/internal/cluster/join"
)

// Headers between members: a forwarded request names the member that
// forwarded it and the original requestor (base64 of its JSON), which the
// receiving member records instead of the forwarding member.
const (
	HeaderForwardedBy = "X-Guestlink-Forwarded-By"
	HeaderRequestor   = "X-Guestlink-Requestor"
)

// Member statuses.
const (
	StatusOnline  = "online"
	StatusOffline = "offline"
	// StatusFenced is a member (shown by itself) whose lease is gone: it
	// was removed or its name joined again.
	StatusFenced = "fenced"
)

// Store is what the cluster needs of the database its members share: the
// membership, and the instances it records at each member (what a member
// shows of another member's instances it cannot ask). The composition
// root builds it over the daemon's database.
type Store interface {
	membership.Store
	// StoredInstance returns the view of the instance called name as the
	// database records it (Location names its member; no runtime state:
	// core/instance.ViewOfRecord); errdefs.ErrNotFound if there is none.
	StoredInstance(ctx context.Context, name string) (*instance.Instance, error)
	// StoredInstances lists the views of the instances recorded at member,
	// of backend ("" for any), as StoredInstance.
	StoredInstances(ctx context.Context, member, backend string) ([]*instance.Instance, error)
}

// Config configures Open.
type Config struct {
	Store    Store
	Postgres bool   // the store is PostgreSQL (else no cluster)
	StateDir string // the member's identity lives in <StateDir>/cluster
	// Name is this member's name (guestlinkd --name; default the host name).
	Name string
	// Address is HOST:PORT of this member's cluster listener
	// (--cluster-address); "" for a member others cannot reach.
	Address string
	// Join is a join token (--join): this daemon joins the cluster.
	Join    string
	Version string
	// Backends lists the backends this member has (for placement).
	Backends func() []string
	// HeartbeatInterval and OfflineAfter: see the defaults.
	HeartbeatInterval, OfflineAfter time.Duration
	// ForwardTimeout bounds a forwarded request (DefaultForwardTimeout).
	ForwardTimeout time.Duration
	Logger         *slog.Logger
}

// Member is a member as the API shows it.
type Member = api.ClusterMember

// Cluster is this daemon's membership.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	id   identity
	keys *keys
	pool *x509.CertPool
	caFP string

	// epoch is this member's lease epoch (membership.Lease); fenced holds the
	// reason once the lease is gone (see Fenced).
	epoch  int64
	fenced atomic.Pointer[error]

	mu      sync.Mutex
	clients map[string]*http.Client // by member address
	peers   map[string]peerCache    // member name -> fingerprint, checked lately
}

type peerCache struct {
	fp   string
	seen time.Time
}

// Open makes this daemon a member: it bootstraps a cluster on a database
// that serves none, joins one with cfg.Join, or checks that the state
// directory's identity is a member of the database's cluster. It returns
// nil (and no error) on SQLite.
func Open(ctx context.Context, cfg Config) (*Cluster, error) {
	if !cfg.Postgres {
		if cfg.Address != "" || cfg.Join != "" {
			return nil, fmt.Errorf("a cluster needs a PostgreSQL database that every member shares (--database postgres://...): %w", errdefs.ErrInvalid)
		}
		return nil, nil
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeat
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.OfflineAfter <= cfg.HeartbeatInterval {
		return nil, fmt.Errorf("cluster offline timeout %v must be longer than the heartbeat interval %v: %w", cfg.OfflineAfter, cfg.HeartbeatInterval, errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backends == nil {
		cfg.Backends = func() []string { return nil }
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, clients: map[string]*http.Client{}, peers: map[string]peerCache{}}
	info, err := cfg.Store.Cluster(ctx)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	id, k, have, lerr := loadIdentity(cfg.StateDir)
	if lerr != nil {
		return nil, fmt.Errorf("cluster: %w", lerr)
	}
	if c.cfg.Name == "" && !have {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cluster member name: no --name and no host name: %w", err)
		}
		c.cfg.Name = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	}
	switch {
	case info == nil && have:
		return nil, fmt.Errorf("this state directory is member %q of cluster %s, but the database serves no cluster: is --database right? (to start afresh, move %s away)",
			id.Name, id.Cluster, dir(cfg.StateDir))
	case info == nil && cfg.Join != "":
		return nil, fmt.Errorf("the database serves no cluster yet, so there is nothing to join: start the first member without --join")
	case info == nil:
		if err := c.bootstrap(ctx); err != nil {
			return nil, err
		}
	case have:
		if err := c.resume(ctx, info, id, k); err != nil {
			return nil, err
		}
	case cfg.Join != "":
		if err := c.join(ctx, info); err != nil {
			return nil, err
		}
	default:
		return nil, c.notAMember(ctx, info)
	}
	c.pool = x509.NewCertPool()
	c.pool.AddCert(c.keys.caCert)
	c.caFP = fingerprint(c.keys.caCert.Raw)
	if err := c.takeLease(ctx); err != nil {
		return nil, err
	}
	if err := c.Beat(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// takeLease reads this member's epoch and makes every instance write of
// the store conditional on it (membership.Lease): a write after this member was
// removed, or after its name joined again, is refused.
func (c *Cluster) takeLease(ctx context.Context) error {
	m, err := c.cfg.Store.Member(ctx, c.cfg.Name)
	if err != nil {
		return fmt.Errorf("cluster: reading this member's lease: %w", err)
	}
	if m.Fingerprint != fingerprint(c.keys.leaf.Raw) {
		return fmt.Errorf("cluster: member %q of the database is another daemon (its certificate is not this one's): refusing to start", c.cfg.Name)
	}
	c.epoch = m.Epoch
	c.cfg.Store.SetLease(membership.Lease{Member: c.cfg.Name, Epoch: m.Epoch}, c.leaseLost)
	c.log.Info("holding this member's instances", "member", c.cfg.Name, "epoch", m.Epoch)
	return nil
}

// leaseLost fences this member: its lease is gone (reason), so it acts for
// no instance any more. It is called once (by the store or a heartbeat).
func (c *Cluster) leaseLost(reason error) {
	if !c.fenced.CompareAndSwap(nil, &reason) {
		return
	}
	c.cfg.Store.LeaseLost(reason)
	c.log.Error("this member's lease is gone: it no longer acts for its instances (their guests keep running) and has left the cluster role; "+
		"to serve them again, replace this daemon: see docs/cluster.md, \"Replacing a member\"",
		"member", c.cfg.Name, "epoch", c.epoch, "reason", reason)
}

// Fenced returns why this member no longer holds its lease ("" while it
// does): it refuses every change to instances (503 naming the reason).
func (c *Cluster) Fenced() string {
	if r := c.fenced.Load(); r != nil {
		return fmt.Sprintf("member %s no longer holds its instances: %v; it refuses changes (its guests keep running)", c.cfg.Name, *r)
	}
	return ""
}

// Epoch is this member's lease epoch.
func (c *Cluster) Epoch() int64 { return c.epoch }

// notAMember explains why a daemon that is no member may not start.
func (c *Cluster) notAMember(ctx context.Context, info *membership.Cluster) error {
	members, err := c.cfg.Store.Members(ctx)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	var names []string
	for _, m := range members {
		names = append(names, fmt.Sprintf("%s (last heartbeat %s ago)", m.Name, time.Since(m.Heartbeat).Round(time.Second)))
	}
	return fmt.Errorf("the database is used by guestlink cluster %s (members: %s) and this daemon is not a member: "+
		"starting would take over their instances. To add this host, run `guestlink cluster add %s` on a member and start this daemon with "+
		"--name %s --join-file FILE (the token in a 0600 file; or GUESTLINK_JOIN=TOKEN) --cluster-address HOST:PORT; or give it a database of its own",
		info.UUID, strings.Join(names, ", "), c.cfg.Name, c.cfg.Name)
}

// bootstrap makes the database a cluster with this daemon its first member.
func (c *Cluster) bootstrap(ctx context.Context) error {
	if err := auth.ValidateName(c.cfg.Name); err != nil {
		return fmt.Errorf("member name (--name): %w", err)
	}
	clusterID := uuid.NewString()
	caPEM, caKeyPEM, err := newCA(clusterID)
	if err != nil {
		return err
	}
	k, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		return err
	}
	key, keyPEM, err := newMemberKey()
	if err != nil {
		return err
	}
	certPEM, err := issue(k, c.cfg.Name, c.cfg.Address, &key.PublicKey)
	if err != nil {
		return err
	}
	if err := c.setKeys(k, certPEM, keyPEM); err != nil {
		return err
	}
	now := time.Now().UTC()
	err = c.cfg.Store.Bootstrap(ctx, &membership.Cluster{UUID: clusterID, CACert: string(caPEM), CreatedAt: now}, &membership.Member{
		Name: c.cfg.Name, Address: c.cfg.Address, Fingerprint: fingerprint(k.leaf.Raw), Version: c.cfg.Version,
		Backends: c.cfg.Backends(), Heartbeat: now, CreatedAt: now,
	})
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return fmt.Errorf("another daemon made this database a cluster at the same moment: start this one again to see how to join it")
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.id = identity{Cluster: clusterID, Name: c.cfg.Name}
	if err := saveIdentity(c.cfg.StateDir, c.id, caPEM, caKeyPEM, certPEM, keyPEM); err != nil {
		return fmt.Errorf("cluster: saving this member's identity: %w", err)
	}
	c.log.Info("bootstrapped a cluster", "cluster", clusterID, "member", c.cfg.Name, "address", c.cfg.Address)
	return nil
}

// setKeys completes k with the member certificate and key.
func (c *Cluster) setKeys(k *keys, certPEM, keyPEM []byte) error {
	var err error
	if k.member, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("loading the member certificate: %w", err)
	}
	if k.leaf, err = x509.ParseCertificate(k.member.Certificate[0]); err != nil {
		return fmt.Errorf("parsing the member certificate: %w", err)
	}
	c.keys = k
	return nil
}

// resume checks that the state directory's identity is a member.
func (c *Cluster) resume(ctx context.Context, info *membership.Cluster, id *identity, k *keys) error {
	if id.Cluster != info.UUID {
		return fmt.Errorf("this state directory belongs to cluster %s, the database to cluster %s: is --database right?", id.Cluster, info.UUID)
	}
	if c.cfg.Name != "" && c.cfg.Name != id.Name {
		return fmt.Errorf("this state directory is cluster member %q, not %q: drop --name or give --name %s", id.Name, c.cfg.Name, id.Name)
	}
	if c.cfg.Join != "" {
		c.log.Warn("--join ignored: this daemon is a member already", "member", id.Name)
	}
	m, err := c.cfg.Store.Member(ctx, id.Name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("this daemon was member %q of the cluster and was removed (guestlink cluster remove): to join again, move %s away and start with --join TOKEN from `guestlink cluster add %s` on a member",
			id.Name, dir(c.cfg.StateDir), id.Name)
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if m.Fingerprint != fingerprint(k.leaf.Raw) {
		return fmt.Errorf("the member certificate in %s is not the one the cluster knows for %q: refusing to start", dir(c.cfg.StateDir), id.Name)
	}
	c.id, c.keys, c.cfg.Name = *id, k, id.Name
	return nil
}

// joinRequest is what a joining daemon sends to a member.
type joinRequest struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Version   string `json:"version"`
	Secret    string `json:"secret"`
	PublicKey string `json:"public_key"` // PKIX, PEM
}

// joinResponse is a member's answer to a join.
type joinResponse struct {
	Certificate string `json:"certificate"` // the joiner's member certificate
	CAKey       string `json:"ca_key"`
	Error       string `json:"error,omitempty"`
}

// join presents cfg.Join to a member and saves the identity it gets.
func (c *Cluster) join(ctx context.Context, info *membership.Cluster) error {
	t, err := parseToken(c.cfg.Join)
	if err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	if c.cfg.Name != t.Name {
		return fmt.Errorf("--join: the token admits member %q: start with --name %s", t.Name, t.Name)
	}
	if c.cfg.Address == "" {
		return fmt.Errorf("--join needs --cluster-address HOST:PORT: where the other members reach this one")
	}
	k, err := parseCA([]byte(info.CACert), nil)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if fingerprint(k.caCert.Raw) != t.CA {
		return fmt.Errorf("--join: the token was made by another cluster (its CA fingerprint is not the one of the cluster in this database): is --database right?")
	}
	key, keyPEM, err := newMemberKey()
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(joinRequest{Name: c.cfg.Name, Address: c.cfg.Address, Version: c.cfg.Version, Secret: t.Secret,
		PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))})
	pool := x509.NewCertPool()
	pool.AddCert(k.caCert)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The member's name is not known yet: check its chain to the
		// cluster CA (pinned by the token) and nothing else.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, pool)
		},
	}}}
	defer client.CloseIdleConnections()
	var errs []error
	for _, addr := range t.Addresses {
		resp, err := c.postJoin(ctx, client, addr, body)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			var refused *joinRefused
			if errors.As(err, &refused) {
				break // the token itself was refused: another member will say the same
			}
			continue
		}
		caKeyPEM := []byte(resp.CAKey)
		full, err := parseCA([]byte(info.CACert), caKeyPEM)
		if err != nil {
			return fmt.Errorf("joining: the member's answer: %w", err)
		}
		if err := c.setKeys(full, []byte(resp.Certificate), keyPEM); err != nil {
			return fmt.Errorf("joining: %w", err)
		}
		c.id = identity{Cluster: info.UUID, Name: c.cfg.Name}
		if err := saveIdentity(c.cfg.StateDir, c.id, []byte(info.CACert), caKeyPEM, []byte(resp.Certificate), keyPEM); err != nil {
			return fmt.Errorf("joining: saving this member's identity: %w", err)
		}
		c.log.Info("joined the cluster", "cluster", info.UUID, "member", c.cfg.Name, "via", addr)
		return nil
	}
	return fmt.Errorf("joining the cluster as %q: %w", c.cfg.Name, errors.Join(errs...))
}

// joinRefused is a member's refusal of a join token.
type joinRefused struct{ msg string }

func (e *joinRefused) Error() string { return "refused: " + e.msg }

func (c *Cluster) postJoin(ctx context.Context, client *http.Client, addr string, body []byte) (*joinResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+JoinPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var out joinResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("answer %d is not a join answer", res.StatusCode)
	}
	if res.StatusCode != http.StatusOK {
		return nil, &joinRefused{msg: out.Error}
	}
	return &out, nil
}

// verifyChain checks that raw (leaf first) chains to pool.
func verifyChain(raw [][]byte, pool *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("the member presented no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		cert, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("parsing the member's certificate: %w", err)
		}
		certs[i] = cert
	}
	inter := x509.NewCertPool()
	for _, cert := range certs[1:] {
		inter.AddCert(cert)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("the member's certificate is not from the cluster CA the token names: %w", err)
	}
	return nil
}

// HandleJoin answers a join request (the body of a POST to JoinPath): it
// spends the token, records the member and issues its certificate. The
// error wraps an errdefs kind; its text is for the joiner.
func (c *Cluster) HandleJoin(ctx context.Context, body []byte) ([]byte, error) {
	var req joinRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("malformed join request: %w", errdefs.ErrInvalid)
	}
	if err := auth.ValidateName(req.Name); err != nil {
		return nil, fmt.Errorf("member name: %w", err)
	}
	if req.Address == "" || req.Secret == "" {
		return nil, fmt.Errorf("a join request needs an address and the token's secret: %w", errdefs.ErrInvalid)
	}
	b, _ := pem.Decode([]byte(req.PublicKey))
	if b == nil {
		return nil, fmt.Errorf("the join request's public key is not PEM: %w", errdefs.ErrInvalid)
	}
	pub, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the join request's public key: %v: %w", err, errdefs.ErrInvalid)
	}
	certPEM, err := issue(c.keys, req.Name, req.Address, pub)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	now := time.Now().UTC()
	err = c.cfg.Store.Join(ctx, auth.Hash(req.Secret), &membership.Member{
		Name: req.Name, Address: req.Address, Fingerprint: fingerprint(cb.Bytes), Version: req.Version,
		Heartbeat: now, CreatedAt: now,
	}, now)
	if err != nil {
		return nil, err
	}
	c.log.Info("a member joined", "member", req.Name, "address", req.Address)
	return json.Marshal(joinResponse{Certificate: string(certPEM), CAKey: string(c.keys.caKeyPEM)})
}

// JoinError encodes a refused join's answer body.
func JoinError(err error) []byte {
	raw, _ := json.Marshal(joinResponse{Error: err.Error()})
	return raw
}

// Name is this member's name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Address is this member's cluster address ("" when it has none).
func (c *Cluster) Address() string { return c.cfg.Address }

// Beat records a heartbeat now (Run does it periodically; the daemon
// also calls it once its plugins are up, so placement sees its backends).
func (c *Cluster) Beat(ctx context.Context) error {
	if r := c.fenced.Load(); r != nil {
		return fmt.Errorf("cluster: %w (%v): %w", membership.ErrLeaseLost, *r, errdefs.ErrUnavailable)
	}
	backends := c.cfg.Backends()
	slices.Sort(backends)
	err := c.cfg.Store.Heartbeat(ctx, c.cfg.Name, c.epoch, c.cfg.Address, c.cfg.Version, backends, time.Now())
	if lost, ok := errors.AsType[*membership.LeaseLostError](err); ok {
		c.leaseLost(lost.Reason)
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// Run heartbeats until ctx ends, or until this member's lease is gone
// (removed, or its name joined again): then it leaves the cluster role.
func (c *Cluster) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.fenced.Load() != nil {
				return
			}
			bctx, cancel := context.WithTimeout(ctx, c.cfg.OfflineAfter)
			if err := c.Beat(bctx); err != nil && ctx.Err() == nil && !errors.Is(err, membership.ErrLeaseLost) {
				c.log.Error("cluster heartbeat", "err", err)
			}
			cancel()
		}
	}
}

// online reports whether a member's heartbeat is recent.
func (c *Cluster) online(m *membership.Member, now time.Time) bool {
	return m.Name == c.cfg.Name || now.Sub(m.Heartbeat) < c.cfg.OfflineAfter
}

// Members lists the members with their status and instance counts.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	ms, err := c.cfg.Store.Members(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := c.cfg.Store.InstanceCounts(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		mb := c.member(m, now, counts[m.Name])
		if mb.Self && m.Epoch != c.epoch {
			// The name is another daemon's now: this one is not listed.
			mb.Self = false
		}
		out = append(out, mb)
	}
	if reason := c.Fenced(); reason != "" {
		// This daemon, as it is: fenced, whatever the database says of
		// its name.
		out = append(out, Member{Name: c.cfg.Name, Address: c.cfg.Address, Version: c.cfg.Version, Status: StatusFenced,
			StatusReason: reason, Self: true, Epoch: c.epoch})
		slices.SortStableFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	}
	return out, nil
}

func (c *Cluster) member(m *membership.Member, now time.Time, n int) Member {
	st := StatusOffline
	if c.online(m, now) {
		st = StatusOnline
	}
	return Member{Name: m.Name, Address: m.Address, Version: m.Version, Backends: m.Backends, Heartbeat: m.Heartbeat,
		HeartbeatAge: now.Sub(m.Heartbeat).Seconds(), Status: st, Instances: n, Self: m.Name == c.cfg.Name, Epoch: m.Epoch}
}

// Member returns one member.
func (c *Cluster) Member(ctx context.Context, name string) (Member, error) {
	m, err := c.cfg.Store.Member(ctx, name)
	if err != nil {
		return Member{}, err
	}
	return c.member(m, time.Now(), 0), nil
}

// AddMember issues a one-time join token for a new member called name.
func (c *Cluster) AddMember(ctx context.Context, name, by string) (string, time.Time, error) {
	if err := auth.ValidateName(name); err != nil {
		return "", time.Time{}, fmt.Errorf("member name: %w", err)
	}
	if c.cfg.Address == "" {
		return "", time.Time{}, fmt.Errorf("this member has no --cluster-address, so a new member could not reach it to join: restart it with --cluster-address HOST:PORT: %w", errdefs.ErrConflict)
	}
	if _, err := c.cfg.Store.Member(ctx, name); err == nil {
		return "", time.Time{}, fmt.Errorf("a member called %q exists already: %w", name, errdefs.ErrAlreadyExists)
	}
	ms, err := c.Members(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	addrs := []string{c.cfg.Address}
	for _, m := range ms {
		if !m.Self && m.Status == StatusOnline && m.Address != "" {
			addrs = append(addrs, m.Address)
		}
	}
	secret, err := newSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := time.Now().UTC()
	exp := now.Add(TokenExpiry)
	if err := c.cfg.Store.CreateClusterToken(ctx, &membership.Token{Name: name, Hash: auth.Hash(secret), ExpiresAt: exp, CreatedAt: now, CreatedBy: by}); err != nil {
		return "", time.Time{}, err
	}
	return joinToken{Name: name, Addresses: addrs, CA: c.caFP, Secret: secret}.encode(), exp, nil
}

// RemoveMember removes a member (not this one); unless force, refused
// while it owns instances. It returns the instances still recorded at it
// (a forced removal leaves them: they show Unknown until deleted, or
// until a daemon joins under that name and takes them over). The removal
// fences the member: its next instance write or heartbeat finds its lease
// gone.
func (c *Cluster) RemoveMember(ctx context.Context, name string, force bool) ([]string, error) {
	if name == c.cfg.Name {
		return nil, fmt.Errorf("member %q is this daemon: remove it from another member: %w", name, errdefs.ErrConflict)
	}
	left, err := c.cfg.Store.RemoveMember(ctx, name, force)
	if err != nil {
		return nil, err
	}
	c.log.Warn("a member was removed", "member", name, "force", force, "instances_left", len(left))
	return left, nil
}

// Locate returns the member an instance is located on ("" outside a
// cluster's ownership, i.e. this daemon) and, when it is another member,
// that member; ErrNotFound when there is no such instance.
func (c *Cluster) Locate(ctx context.Context, instance string) (string, error) {
	rec, err := c.cfg.Store.StoredInstance(ctx, instance)
	if err != nil {
		return "", err
	}
	return rec.Location, nil
}

// Reach returns a client and base URL for another member, or an error
// wrapping errdefs.ErrUnavailable-like text when it is offline
// (ErrOffline).
func (c *Cluster) Reach(ctx context.Context, member string) (*http.Client, string, error) {
	m, err := c.cfg.Store.Member(ctx, member)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, "", fmt.Errorf("member %q is not in the cluster (removed?): %w", member, ErrOffline)
	}
	if err != nil {
		return nil, "", err
	}
	if !c.online(m, time.Now()) {
		return nil, "", fmt.Errorf("member %s is offline (last heartbeat %s ago): %w", member, time.Since(m.Heartbeat).Round(time.Second), ErrOffline)
	}
	if m.Address == "" {
		return nil, "", fmt.Errorf("member %s has no --cluster-address: %w", member, ErrOffline)
	}
	return c.client(m.Name, m.Address), "https://" + m.Address, nil
}

// ErrOffline means a member cannot be reached: offline, removed or
// without an address.
var ErrOffline = errors.New("member unreachable")

func (c *Cluster) client(name, addr string) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := name + "@" + addr
	if cl, ok := c.clients[key]; ok {
		return cl
	}
	cl := &http.Client{Transport: transport(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.keys.member},
		RootCAs:      c.pool,
		ServerName:   name, // the member certificate's DNS name
	})}
	c.clients[key] = cl
	return cl
}

// ServerTLS is the TLS configuration of this member's cluster listener:
// a member certificate is verified against the cluster CA when given (the
// join route is the only one served without).
func (c *Cluster) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.keys.member},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    c.pool,
	}
}

// PeerOf returns the member a TLS connection's verified client
// certificate belongs to: it must chain to the cluster CA and be the
// certificate the cluster recorded for that member.
func (c *Cluster) PeerOf(ctx context.Context, cs *tls.ConnectionState) (string, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", false
	}
	chain := cs.VerifiedChains[0]
	if fingerprint(chain[len(chain)-1].Raw) != c.caFP {
		return "", false
	}
	leaf := cs.PeerCertificates[0]
	name, fp := leaf.Subject.CommonName, fingerprint(leaf.Raw)
	c.mu.Lock()
	pc, ok := c.peers[name]
	c.mu.Unlock()
	if ok && pc.fp == fp && time.Since(pc.seen) < c.cfg.HeartbeatInterval {
		return name, true
	}
	m, err := c.cfg.Store.Member(ctx, name)
	if err != nil || m.Fingerprint != fp {
		return "", false
	}
	c.mu.Lock()
	c.peers[name] = peerCache{fp: fp, seen: time.Now()}
	c.mu.Unlock()
	return name, true
}

// Place picks the member a new instance of backend goes to: the online
// member with that backend that has the fewest instances (ties: by name).
func (c *Cluster) Place(ctx context.Context, backend string) (string, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	best := -1
	for i, m := range ms {
		if m.Status != StatusOnline || (!m.Self && m.Address == "") || !slices.Contains(m.Backends, backend) {
			continue
		}
		if best < 0 || m.Instances < ms[best].Instances {
			best = i
		}
	}
	if best < 0 {
		return "", fmt.Errorf("no online member has backend %q: %w", backend, errdefs.ErrInvalid)
	}
	return ms[best].Name, nil
}

// Online reports whether member is online.
func (c *Cluster) Online(ctx context.Context, member string) (bool, time.Time, error) {
	m, err := c.cfg.Store.Member(ctx, member)
	if err != nil {
		return false, time.Time{}, err
	}
	return c.online(m, time.Now()), m.Heartbeat, nil
}

// OfflineAfter is the heartbeat age after which a member is offline.
func (c *Cluster) OfflineAfter() time.Duration { return c.cfg.OfflineAfter }
