// Package membership holds what a cluster's shared database records of
// it: the cluster (its CA), its members, their one-time join tokens and the
// lease each member holds on the instances located on it, with the Store
// interface that keeps them. core/cluster is the service over it; the
// daemon's database implements Store (PostgreSQL, where every member
// shares one database).
package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guestlink/guestlink/errdefs"
)

// Cluster is the one record that says a database serves a cluster: its id
// and the certificate of the cluster's CA (public: every member verifies
// its peers with it).
type Cluster struct {
	UUID   string
	CACert string // PEM
	// LastEpoch is the last member epoch handed out (Lease).
	LastEpoch int64
	CreatedAt time.Time
}

// Member is one daemon of a cluster as the database records it.
type Member struct {
	Name        string
	Address     string   // HOST:PORT of its cluster listener ("" when others cannot reach it)
	Fingerprint string   // SHA-256 of its member certificate
	Version     string   // the daemon's version at its last heartbeat
	Backends    []string // the backends it has (nil: none)
	Heartbeat   time.Time
	// Epoch is the generation of this membership (Lease): new at every
	// join, so a name that joins again fences its previous daemon.
	Epoch     int64
	CreatedAt time.Time
}

// Token is a one-time join token for the member Name: only the SHA-256 of
// its secret is kept; UsedAt is set by the join that spends it.
type Token struct {
	Name      string // the member it admits
	Hash      string
	ExpiresAt time.Time
	UsedAt    *time.Time
	// RevokedAt is set when the member the token admits joined with
	// another token.
	RevokedAt *time.Time
	CreatedAt time.Time
	CreatedBy string
}

// Lease is a cluster member's hold on the instances located on it: its
// name and epoch, the generation of its membership (handed out by the
// cluster's counter, Cluster.LastEpoch, at every join, so a name that
// joins again never gets an epoch it had).
type Lease struct {
	Member string
	Epoch  int64
}

// ErrLeaseLost means this cluster member's lease on its instances is gone:
// it was removed from the cluster, or its name joined again (a new epoch).
// Every write it tries to an instance is refused; errors wrapping it also
// wrap errdefs.ErrUnavailable (503).
var ErrLeaseLost = errors.New("this member's lease on its instances is gone")

// LeaseLostError is the error of a write or heartbeat refused because the
// member's lease is gone: Reason says why (removed, or re-joined under a
// new epoch). It wraps ErrLeaseLost and errdefs.ErrUnavailable.
type LeaseLostError struct {
	Reason error
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("%v: %v", ErrLeaseLost, e.Reason)
}

// Unwrap returns ErrLeaseLost and errdefs.ErrUnavailable.
func (e *LeaseLostError) Unwrap() []error { return []error{ErrLeaseLost, errdefs.ErrUnavailable} }

// Store keeps a cluster's membership in the database its members share.
// All methods are safe for concurrent use; a nil return means the change
// is durable. Errors are errdefs kinds (ErrNotFound, ErrAlreadyExists,
// ErrConflict) or wrap ErrLeaseLost.
type Store interface {
	// Cluster returns the cluster record, or ErrNotFound when the database
	// serves no cluster.
	Cluster(ctx context.Context) (*Cluster, error)
	// Bootstrap makes the database a cluster whose first member is m
	// (epoch 1: it sets c.LastEpoch and m.Epoch), and gives the instances
	// without a location to it: ErrAlreadyExists when it already is one.
	Bootstrap(ctx context.Context, c *Cluster, m *Member) error
	// Members lists the members by name.
	Members(ctx context.Context) ([]*Member, error)
	// Member returns the member called name.
	Member(ctx context.Context, name string) (*Member, error)
	// Heartbeat records that member name, of epoch, is alive at at, with
	// its address, version and backends; a LeaseLostError once it was
	// removed or its name joined again (another epoch).
	Heartbeat(ctx context.Context, name string, epoch int64, address, version string, backends []string, at time.Time) error
	// CreateClusterToken stores a join token.
	CreateClusterToken(ctx context.Context, t *Token) error
	// Join spends the token whose secret hashes to hash and adds m, in one
	// transaction: ErrNotFound for an unknown token, ErrConflict for a
	// used, revoked or expired one or a name that differs from the
	// token's, and ErrAlreadyExists when a member of that name exists. It
	// gives m a new epoch (m.Epoch) and revokes the name's other tokens.
	Join(ctx context.Context, hash string, m *Member, now time.Time) error
	// RemoveMember deletes member name; unless force, ErrConflict while
	// instances are located on it. It returns the names of the instances
	// still located on it (left in the database by a forced removal).
	RemoveMember(ctx context.Context, name string, force bool) ([]string, error)
	// SetLease makes every later instance write conditional on l: a write
	// touches only instances located on l.Member, and only while that
	// member still has epoch l.Epoch. A write that finds the lease gone
	// fails with a LeaseLostError, and lost is called (once).
	SetLease(l Lease, lost func(error))
	// LeaseLost marks the lease lost for reason (a heartbeat found it
	// gone): every later instance write fails at once.
	LeaseLost(reason error)
	// InstanceCounts returns how many instances each location (member
	// name, "" outside a cluster) holds.
	InstanceCounts(ctx context.Context) (map[string]int, error)
}
