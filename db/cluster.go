package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guestlink/guestlink/core/membership"
	"github.com/guestlink/guestlink/errdefs"
)

// clusterInfoRow is the one row that says a database serves a cluster
// (membership.Cluster).
type clusterInfoRow struct {
	ID     int64  `gorm:"primaryKey"` // always 1
	UUID   string `gorm:"size:36;not null"`
	CACert string `gorm:"type:text;not null"` // PEM
	// LastEpoch is the last member epoch handed out (Lease).
	LastEpoch int64 `gorm:"not null;default:1"`
	CreatedAt time.Time
}

// TableName is the table of the cluster row.
func (clusterInfoRow) TableName() string { return "cluster_infos" }

// clusterMemberRow is the row of one daemon of a cluster
// (membership.Member): its backends comma-separated.
type clusterMemberRow struct {
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

// TableName is the table of cluster members.
func (clusterMemberRow) TableName() string { return "cluster_members" }

func clusterMemberRowOf(m *membership.Member) *clusterMemberRow {
	return &clusterMemberRow{Name: m.Name, Address: m.Address, Fingerprint: m.Fingerprint, Version: m.Version,
		Backends: strings.Join(m.Backends, ","), Heartbeat: m.Heartbeat, Epoch: m.Epoch, CreatedAt: m.CreatedAt}
}

func (r *clusterMemberRow) member() *membership.Member {
	var backends []string
	if r.Backends != "" {
		backends = strings.Split(r.Backends, ",")
	}
	return &membership.Member{Name: r.Name, Address: r.Address, Fingerprint: r.Fingerprint, Version: r.Version,
		Backends: backends, Heartbeat: r.Heartbeat.UTC(), Epoch: r.Epoch, CreatedAt: r.CreatedAt.UTC()}
}

// clusterTokenRow is the row of a one-time join token (membership.Token):
// only the SHA-256 of its secret.
type clusterTokenRow struct {
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

// TableName is the table of join tokens.
func (clusterTokenRow) TableName() string { return "cluster_tokens" }

var _ membership.Store = (*sqlStore)(nil)

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
func (s *sqlStore) Cluster(ctx context.Context) (*membership.Cluster, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading cluster: %w", err)
	}
	var c clusterInfoRow
	if err := q.Where("id = 1").Take(&c).Error; err != nil {
		return nil, fmt.Errorf("reading cluster: %w", translate(err))
	}
	return &membership.Cluster{UUID: c.UUID, CACert: c.CACert, LastEpoch: c.LastEpoch, CreatedAt: c.CreatedAt}, nil
}

// Bootstrap creates the cluster row and its first member.
func (s *sqlStore) Bootstrap(ctx context.Context, info *membership.Cluster, m *membership.Member) error {
	info.LastEpoch, m.Epoch = 1, 1
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&clusterInfoRow{}).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("the database serves a cluster already: %w", ErrAlreadyExists)
		}
		if err := tx.Create(&clusterInfoRow{ID: 1, UUID: info.UUID, CACert: info.CACert, LastEpoch: info.LastEpoch, CreatedAt: info.CreatedAt}).Error; err != nil {
			return err
		}
		if err := tx.Create(clusterMemberRowOf(m)).Error; err != nil {
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
func (s *sqlStore) Members(ctx context.Context) ([]*membership.Member, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing cluster members: %w", err)
	}
	var rows []*clusterMemberRow
	if err := q.Order("name").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing cluster members: %w", translate(err))
	}
	out := make([]*membership.Member, len(rows))
	for i, m := range rows {
		out[i] = m.member()
	}
	return out, nil
}

// Member returns the member called name.
func (s *sqlStore) Member(ctx context.Context, name string) (*membership.Member, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading cluster member %q: %w", name, err)
	}
	var m clusterMemberRow
	if err := q.Where("name = ?", name).Take(&m).Error; err != nil {
		return nil, fmt.Errorf("cluster member %q: %w", name, translate(err))
	}
	return m.member(), nil
}

// Heartbeat records that a member is alive. It goes straight to the pool
// (not the group-commit writer), so a busy writer never makes a member
// look offline.
func (s *sqlStore) Heartbeat(ctx context.Context, name string, epoch int64, address, version string, backends []string, at time.Time) error {
	q, err := s.reader(ctx)
	if err != nil {
		return fmt.Errorf("heartbeat of %q: %w", name, err)
	}
	res := q.Model(&clusterMemberRow{}).Where("name = ? AND epoch = ?", name, epoch).
		Updates(map[string]any{"address": address, "version": version, "backends": strings.Join(backends, ","), "heartbeat": at.UTC()})
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
func (s *sqlStore) CreateClusterToken(ctx context.Context, t *membership.Token) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		return tx.Create(&clusterTokenRow{Name: t.Name, Hash: t.Hash, ExpiresAt: t.ExpiresAt, UsedAt: t.UsedAt, RevokedAt: t.RevokedAt,
			CreatedAt: t.CreatedAt, CreatedBy: t.CreatedBy}).Error
	})
	if err != nil {
		return fmt.Errorf("creating join token for %q: %w", t.Name, translate(err))
	}
	return nil
}

// Join spends a token and adds a member in one transaction.
func (s *sqlStore) Join(ctx context.Context, hash string, m *membership.Member, now time.Time) error {
	err := s.w.do(ctx, false, func(tx *gorm.DB) error {
		var t clusterTokenRow
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
		if err := tx.Model(&clusterTokenRow{}).Where("id = ?", t.ID).Update("used_at", used).Error; err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&clusterMemberRow{}).Where("name = ?", m.Name).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a member called %q exists already: %w", m.Name, ErrAlreadyExists)
		}
		// The name's other tokens admit nobody once it joined.
		if err := tx.Model(&clusterTokenRow{}).Where("name = ? AND used_at IS NULL AND revoked_at IS NULL", m.Name).
			Update("revoked_at", used).Error; err != nil {
			return err
		}
		// A new epoch: above every one handed out, so a name that joins
		// again fences the daemon that held it before.
		var info clusterInfoRow
		if err := tx.Model(&clusterInfoRow{}).Where("id = 1").Update("last_epoch", gorm.Expr("last_epoch + 1")).Error; err != nil {
			return err
		}
		if err := tx.Where("id = 1").Take(&info).Error; err != nil {
			return err
		}
		m.Epoch = info.LastEpoch
		return tx.Create(clusterMemberRowOf(m)).Error
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
		return affectedOne(tx.Where("name = ?", name).Delete(&clusterMemberRow{}))
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
