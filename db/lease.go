package db

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/membership"
)

// ErrLeaseLost is membership.ErrLeaseLost, for the store's callers that
// test for it by this name.
var ErrLeaseLost = membership.ErrLeaseLost

// lease is the store's lease state (SetLease).
type lease struct {
	membership.Lease
	lost     func(error)  // called once, when a write finds the lease gone
	gone     atomic.Value // error: the lease is lost (set once)
	lostOnce sync.Once
}

// SetLease makes every later write to an instance row conditional on l:
// an update, delete or Ready clearing touches only rows located on
// l.Member, and only while the member row l.Member still has epoch l.Epoch
// (checked in the same statement, holding that row FOR SHARE until commit,
// so a removal or re-join waits for the write and the write never follows
// them); a create is made only while the lease holds. A write that finds
// the lease gone fails with ErrLeaseLost, lost is called (once), and every
// later instance write fails at once without asking the database.
func (s *sqlStore) SetLease(l membership.Lease, lost func(error)) {
	s.lease.Store(&lease{Lease: l, lost: lost})
}

// LeaseLost marks the lease lost for reason (a heartbeat found it gone):
// every later instance write fails with ErrLeaseLost.
func (s *sqlStore) LeaseLost(reason error) {
	if l := s.lease.Load(); l != nil {
		l.markLost(reason)
	}
}

func (l *lease) markLost(reason error) {
	l.lostOnce.Do(func() {
		l.gone.Store(reason)
		if l.lost != nil {
			go l.lost(reason)
		}
	})
}

// leaseErr returns the error of a write refused because the lease is gone.
func leaseErr(reason error) error {
	return &membership.LeaseLostError{Reason: reason}
}

// heldLease returns the lease instance writes are conditional on (nil: no
// lease, on SQLite or outside a cluster), or the error of a lost one.
func (s *sqlStore) heldLease() (*lease, error) {
	l := s.lease.Load()
	if l == nil {
		return nil, nil
	}
	if r, ok := l.gone.Load().(error); ok {
		return nil, leaseErr(r)
	}
	return l, nil
}

// leaseClause is the condition an instance write under l adds: the row is
// located on l's member and that member still holds epoch l.Epoch.
const leaseClause = "location = ? AND EXISTS (SELECT 1 FROM cluster_members WHERE name = ? AND epoch = ? FOR SHARE)"

// fenced returns the write's error when it affected no row under l: the
// lease's if the member row no longer holds l.Epoch (and marks it lost),
// else ErrRecordNotFound (no such instance at this member).
func (s *sqlStore) fenced(tx *gorm.DB, l *lease) error {
	var m clusterMemberRow
	err := tx.Where("name = ?", l.Member).Take(&m).Error
	var reason error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		reason = fmt.Errorf("member %s was removed from the cluster", l.Member)
	case err != nil:
		return err
	case m.Epoch != l.Epoch:
		reason = fmt.Errorf("member %s joined the cluster again (epoch %d fences this daemon's epoch %d)", l.Member, m.Epoch, l.Epoch)
	default:
		return gorm.ErrRecordNotFound
	}
	l.markLost(reason)
	return leaseErr(reason)
}

// checkLease fails unless l still holds (for a create), holding the member
// row FOR SHARE until the transaction ends.
func (s *sqlStore) checkLease(tx *gorm.DB, l *lease) error {
	var n int64
	if err := tx.Raw("SELECT count(*) FROM (SELECT 1 FROM cluster_members WHERE name = ? AND epoch = ? FOR SHARE) AS held", l.Member, l.Epoch).Scan(&n).Error; err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	return s.fenced(tx, l)
}

// leaseMigration gives members an epoch and the cluster its epoch
// counter, and join tokens a revocation time.
func leaseMigration() *gormigrate.Migration {
	return &gormigrate.Migration{
		ID: "202611270101_cluster_lease",
		Migrate: func(tx *gorm.DB) error {
			// Frozen copies of the columns as of this migration.
			type member struct {
				Epoch int64 `gorm:"not null;default:1"`
			}
			type info struct {
				LastEpoch int64 `gorm:"not null;default:1"`
			}
			type token struct {
				RevokedAt *time.Time
			}
			for _, c := range []struct {
				table, field string
				model        any
			}{{"cluster_members", "Epoch", &member{}}, {"cluster_infos", "LastEpoch", &info{}}, {"cluster_tokens", "RevokedAt", &token{}}} {
				if err := tx.Table(c.table).Migrator().AddColumn(c.model, c.field); err != nil {
					return fmt.Errorf("adding %s.%s: %w", c.table, c.field, err)
				}
			}
			// Existing members were each given epoch 1: the counter
			// starts above every epoch handed out.
			return tx.Exec("UPDATE cluster_infos SET last_epoch = 1").Error
		},
		Rollback: func(tx *gorm.DB) error {
			for _, c := range []struct{ table, field string }{{"cluster_members", "epoch"}, {"cluster_infos", "last_epoch"}, {"cluster_tokens", "revoked_at"}} {
				if err := tx.Exec("ALTER TABLE " + c.table + " DROP COLUMN " + c.field).Error; err != nil {
					return err
				}
			}
			return nil
		},
	}
}
