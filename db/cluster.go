package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guestlink/guestlink/errdefs"
)

// ClusterInfo is the one row that says a database serves a cluster: its id
// and the certificate of the cluster's CA (public: every member verifies
// its peers with it).
type ClusterInfo struct {
	ID     int64  `gorm:"primaryKey"` // always 1
	UUID   string `gorm:"size:36;not null"`
	CACert string `gorm:"type:text;not null"` // PEM
	// LastEpoch is the last member epoch handed out (Lease).
	LastEpoch int64 `gorm:"not null;default:1"`
	CreatedAt time.Time
}

// ClusterMember is one daemon of a cluster.
type ClusterMember struct {
	ID          int64     `gorm:"primaryKey"`
	Name        string    `gorm:"uniqueIndex:idx_cluster_members_name;size:63;not null"`
	Address     string    `gorm:"size:255;not null"` // HOST:PORT of its cluster listener
	Fingerprint string    `gorm:"size:64;not null"`  // SHA-256 of its member certificate
	Version     string    `gorm:"size:64"`
	Backends    string    `gorm:"type:text;not null"` // comma-separated backend names
	Heartbeat   time.Time `gorm:"not null"`
	// Epoch is the generation of this membership (Lease): new at every
	// join, so a name that joins again fences its previous daemon.
	Epoch     int64     `gorm:"not null;default:1"`
	CreatedAt time.Time `gorm:"not null"`
}

// ClusterToken is a one-time join token for the member Name: only the
// SHA-256 of its secret is kept; UsedAt is set by the join that spends it.
type ClusterToken struct {
	ID        int64     `gorm:"primaryKey"`
	Name      string    `gorm:"size:63;not null"` // the member it admits
	Hash      string    `gorm:"uniqueIndex:idx_cluster_tokens_hash;size:64;not null"`
	ExpiresAt time.Time `gorm:"not null"`
	UsedAt    *time.Time
	// RevokedAt is set when the member the token admits joined with
	// another token.
	RevokedAt *time.Time
	CreatedAt time.Time `gorm:"not null"`
	CreatedBy string    `gorm:"size:255"`
}

// ClusterStore keeps the cluster's membership. The Store returned by Open
// implements it.
type ClusterStore interface {
	// Cluster returns the cluster row, or ErrNotFound when the database
	// serves no cluster.
	Cluster(ctx context.Context) (*ClusterInfo, error)
	// Bootstrap makes the database a cluster whose first member is m, and
	// gives the instances without a location to it: ErrAlreadyExists when
	// it already is one.
	Bootstrap(ctx context.Context, info *ClusterInfo, m *ClusterMember) error
	// Members lists the members by name.
	Members(ctx context.Context) ([]*ClusterMember, error)
	// Member returns the member called name.
	Member(ctx context.Context, name string) (*ClusterMember, error)
	// Heartbeat records that member name, of epoch, is alive now, at
	// address and version, with these backends; ErrLeaseLost once it was
	// removed or its name joined again (another epoch).
	Heartbeat(ctx context.Context, name string, epoch int64, address, version, backends string, at time.Time) error
	// CreateClusterToken stores a join token.
	CreateClusterToken(ctx context.Context, t *ClusterToken) error
	// Join spends the token whose secret hashes to hash and adds m, in one
	// transaction: ErrNotFound for an unknown token, ErrConflict for a
	// used, revoked or expired one or a name that differs from the
	// token's, and ErrAlreadyExists when a member of that name exists. It
	// gives m a new epoch (m.Epoch) and revokes the name's other tokens.
	Join(ctx context.Context, hash string, m *ClusterMember, now time.Time) error
	// RemoveMember deletes member name; unless force, ErrConflict while
	// instances are located on it. It returns the names of the instances
	// still located on it (left in the database by a forced removal).
	RemoveMember(ctx context.Context, name string, force bool) ([]string, error)
	// SetLease makes every later instance write conditional on l (see
	// sqlStore.SetLease); lost is called once when a write finds it gone.
	SetLease(l Lease, lost func(error))
	// LeaseLost marks the lease lost: instance writes fail at once.
	LeaseLost(reason error)
	// InstanceCounts returns how many instances each location holds.
	InstanceCounts(ctx context.Context) (map[string]int, error)
}

var _ ClusterStore = (*sqlStore)(nil)

// clusterMigration creates the cluster tables and the instances' location.
func clusterMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611250101_cluster",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the models as of this migration.
			type clusterInfo struct {
				ID        int64  `gorm:"primaryKey"`
				UUID      string `gorm:"size:36;not null"`
				CACert    string `gorm:"type:text;not null"`
				CreatedAt time.Time
			}
			type clusterMember struct {
				ID          int64     `gorm:"primaryKey"`
				Name        string    `gorm:"uniqueIndex:idx_cluster_members_name;size:63;not null"`
				Address     string    `gorm:"size:255;not null"`
				Fingerprint string    `gorm:"size:64;not null"`
				Version     string    `gorm:"size:64"`
				Backends    string    `gorm:"type:text;not null"`
				Heartbeat   time.Time `gorm:"not null"`
				CreatedAt   time.Time `gorm:"not null"`
			}
			type clusterToken struct {
				ID        int64     `gorm:"primaryKey"`
				Name      string    `gorm:"size:63;not null"`
				Hash      string    `gorm:"uniqueIndex:idx_cluster_tokens_hash;size:64;not null"`
				ExpiresAt time.Time `gorm:"not null"`
				UsedAt    *time.Time
				CreatedAt time.Time `gorm:"not null"`
				CreatedBy string    `gorm:"size:255"`
			}
			for _, t := range []any{&clusterInfo{}, &clusterMember{}, &clusterToken{}} {
				if err := tx.Migrator().CreateTable(t); err != nil {
					return fmt.Errorf("creating cluster tables: %w", err)
				}
			}
			type instance struct {
				Location string `gorm:"index:idx_instances_location;size:63;not null;default:''"`
			}
			if err := tx.Table("instances").Migrator().AddColumn(&instance{}, "Location"); err != nil {
				return fmt.Errorf("adding instances.location: %w", err)
			}
			if err := tx.Table("instances").Migrator().CreateIndex(&instance{}, "idx_instances_location"); err != nil {
				return fmt.Errorf("indexing instances.location: %w", err)
			}
			return nil
		},
		Rollback: func(tx *gorm.DB) error {
			return tx.Migrator().DropTable("cluster_tokens", "cluster_members", "cluster_infos")
		},
	}
}

// Cluster returns the cluster row.
func (s *sqlStore) Cluster(ctx context.Context) (*ClusterInfo, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading cluster: %w", err)
	}
	var c ClusterInfo
	if err := q.Where("id = 1").Take(&c).Error; err != nil {
		return nil, fmt.Errorf("reading cluster: %w", translate(err))
	}
	return &c, nil
}

// Bootstrap creates the cluster row and its first member.
func (s *sqlStore) Bootstrap(ctx context.Context, info *ClusterInfo, m *ClusterMember) error {
	info.ID, info.LastEpoch, m.Epoch = 1, 1, 1
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&ClusterInfo{}).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("the database serves a cluster already: %w", ErrAlreadyExists)
		}
		if err := tx.Create(info).Error; err != nil {
			return err
		}
		m.ID = 0
		if err := tx.Create(m).Error; err != nil {
			return err
		}
		return tx.Model(&instanceRow{}).Where("location = ?", "").Update("location", m.Name).Error
	})
	if err != nil {
		return fmt.Errorf("bootstrapping cluster: %w", translate(err))
	}
	return nil
}

// Members lists the members by name.
func (s *sqlStore) Members(ctx context.Context) ([]*ClusterMember, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing cluster members: %w", err)
	}
	var out []*ClusterMember
	if err := q.Order("name").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("listing cluster members: %w", translate(err))
	}
	for _, m := range out {
		m.Heartbeat, m.CreatedAt = m.Heartbeat.UTC(), m.CreatedAt.UTC()
	}
	return out, nil
}

// Member returns the member called name.
func (s *sqlStore) Member(ctx context.Context, name string) (*ClusterMember, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading cluster member %q: %w", name, err)
	}
	var m ClusterMember
	if err := q.Where("name = ?", name).Take(&m).Error; err != nil {
		return nil, fmt.Errorf("cluster member %q: %w", name, translate(err))
	}
	m.Heartbeat, m.CreatedAt = m.Heartbeat.UTC(), m.CreatedAt.UTC()
	return &m, nil
}

// Heartbeat records that a member is alive. It goes straight to the pool
// (not the group-commit writer), so a busy writer never makes a member
// look offline.
func (s *sqlStore) Heartbeat(ctx context.Context, name string, epoch int64, address, version, backends string, at time.Time) error {
	q, err := s.reader(ctx)
	if err != nil {
		return fmt.Errorf("heartbeat of %q: %w", name, err)
	}
	res := q.Model(&ClusterMember{}).Where("name = ? AND epoch = ?", name, epoch).
		Updates(map[string]any{"address": address, "version": version, "backends": backends, "heartbeat": at.UTC()})
	if res.Error != nil {
		return fmt.Errorf("heartbeat of %q: %w", name, translate(res.Error))
	}
	if res.RowsAffected == 1 {
		return nil
	}
	m, err := s.Member(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("heartbeat of %q: %w", name, leaseErr(fmt.Errorf("member %s was removed from the cluster", name)))
	case err != nil:
		return fmt.Errorf("heartbeat of %q: %w", name, err)
	}
	return fmt.Errorf("heartbeat of %q: %w", name, leaseErr(fmt.Errorf("member %s joined the cluster again (epoch %d fences this daemon's epoch %d)", name, m.Epoch, epoch)))
}

// CreateClusterToken stores a join token.
func (s *sqlStore) CreateClusterToken(ctx context.Context, t *ClusterToken) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		t.ID = 0
		return tx.Create(t).Error
	})
	if err != nil {
		return fmt.Errorf("creating join token for %q: %w", t.Name, translate(err))
	}
	return nil
}

// Join spends a token and adds a member in one transaction.
func (s *sqlStore) Join(ctx context.Context, hash string, m *ClusterMember, now time.Time) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var t ClusterToken
		q := tx.Where("hash = ?", hash)
		if s.engine == EnginePostgres {
			q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
		}
		if err := q.Take(&t).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return fmt.Errorf("the join token is not valid: %w", errdefs.ErrNotFound)
			}
			return err
		}
		switch {
		case t.RevokedAt != nil:
			return fmt.Errorf("the join token was revoked at %s, when member %s joined with another token: %w",
				t.RevokedAt.UTC().Format(time.RFC3339), t.Name, errdefs.ErrConflict)
		case t.UsedAt != nil:
			return fmt.Errorf("the join token was used already (at %s): ask a member for a new one (guestlink cluster add %s): %w",
				t.UsedAt.UTC().Format(time.RFC3339), t.Name, errdefs.ErrConflict)
		case now.After(t.ExpiresAt):
			return fmt.Errorf("the join token expired at %s: ask a member for a new one (guestlink cluster add %s): %w",
				t.ExpiresAt.UTC().Format(time.RFC3339), t.Name, errdefs.ErrConflict)
		case t.Name != m.Name:
			return fmt.Errorf("the join token admits member %q, not %q: start with --name %s: %w", t.Name, m.Name, t.Name, errdefs.ErrConflict)
		}
		used := now.UTC()
		if err := tx.Model(&ClusterToken{}).Where("id = ?", t.ID).Update("used_at", used).Error; err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&ClusterMember{}).Where("name = ?", m.Name).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a member called %q exists already: %w", m.Name, ErrAlreadyExists)
		}
		// The name's other tokens admit nobody once it joined.
		if err := tx.Model(&ClusterToken{}).Where("name = ? AND used_at IS NULL AND revoked_at IS NULL", m.Name).
			Update("revoked_at", used).Error; err != nil {
			return err
		}
		// A new epoch: above every one handed out, so a name that joins
		// again fences the daemon that held it before.
		var info ClusterInfo
		if err := tx.Model(&ClusterInfo{}).Where("id = 1").Update("last_epoch", gorm.Expr("last_epoch + 1")).Error; err != nil {
			return err
		}
		if err := tx.Where("id = 1").Take(&info).Error; err != nil {
			return err
		}
		m.ID, m.Epoch = 0, info.LastEpoch
		return tx.Create(m).Error
	})
	if err != nil {
		return fmt.Errorf("joining the cluster as %q: %w", m.Name, translate(err))
	}
	return nil
}

// RemoveMember deletes a member.
func (s *sqlStore) RemoveMember(ctx context.Context, name string, force bool) ([]string, error) {
	var left []string
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		left = nil
		if err := tx.Model(&instanceRow{}).Where("location = ?", name).Order("name").Pluck("name", &left).Error; err != nil {
			return err
		}
		if !force && len(left) > 0 {
			return fmt.Errorf("member %q still owns %d instance(s): delete them first, or remove it with --force (its instances stay in the database, located on a member that is gone): %w", name, len(left), errdefs.ErrConflict)
		}
		return affectedOne(tx.Where("name = ?", name).Delete(&ClusterMember{}))
	})
	if err != nil {
		return nil, fmt.Errorf("removing cluster member %q: %w", name, translate(err))
	}
	return left, nil
}

// InstanceCounts returns how many instances each location holds.
func (s *sqlStore) InstanceCounts(ctx context.Context) (map[string]int, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting instances: %w", err)
	}
	var rows []struct {
		Location string
		N        int
	}
	if err := q.Model(&instanceRow{}).Select("location, count(*) as n").Group("location").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("counting instances: %w", translate(err))
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Location] = r.N
	}
	return out, nil
}
