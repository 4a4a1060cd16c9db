package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// readyKey is the config key ClearReadyAll removes.
const readyKey = "volatile.last_state.ready"

// sqlStore is the Store on a gorm database (SQLite or PostgreSQL). Reads go
// straight to the connection pool; writes go through the group-commit
// writer.
//
// Event ids: the single writer commits event appends in id order, so a
// reader never sees id n+1 before id n. With several daemons on one
// PostgreSQL database, event-appending transactions also take a
// transaction-scoped advisory lock, which keeps that order across daemons
// at the cost of serialising their event writes. On PostgreSQL the ids of
// rolled-back appends are skipped (sequence holes); a hole never fills
// later, so resuming after the last seen id stays correct. On SQLite a
// rolled-back id may be given to a later event, which no reader has seen.
type sqlStore struct {
	db     *gorm.DB // readers' pool
	wdb    *gorm.DB // the writer's connection
	engine string
	name   string
	w      *writer
	ckpt   *checkpointer // SQLite's checkpoints (nil: PostgreSQL, or SQLite's own)
	prep   *prepared     // used only by the writer's goroutine
	log    *slog.Logger
	// lease makes instance writes conditional on a cluster member's
	// lease (SetLease; nil outside a cluster).
	lease atomic.Pointer[lease]

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// reader returns the database handle for a read, or ErrClosed.
func (s *sqlStore) reader(ctx context.Context) (*gorm.DB, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.db.WithContext(ctx), nil
}

var _ Store = (*sqlStore)(nil)

func newStore(ctx context.Context, rdb, wdb *gorm.DB, ckpt *checkpointer, engine, name string, o *options) (*sqlStore, error) {
	if err := migrate(ctx, wdb, engine); err != nil {
		return nil, fmt.Errorf("opening database %q: %w", name, err)
	}
	wsql, err := wdb.DB()
	if err != nil {
		return nil, fmt.Errorf("opening database %q: %w", name, err)
	}
	prep := &prepared{db: wsql, engine: engine}
	if err := prep.prepare(ctx); err != nil {
		return nil, fmt.Errorf("opening database %q: %w", name, err)
	}
	s := &sqlStore{db: rdb, wdb: wdb, engine: engine, name: name, log: o.logger, prep: prep, ckpt: ckpt}
	s.w = newWriter(wdb, engine, o.maxBatch, o.keep, o.logger, ckpt, o.trace)
	if o.logger != nil {
		o.logger.Info("database opened", "engine", engine, "database", name)
	}
	return s, nil
}

// translate maps gorm's error kinds to the Store's.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return ErrNotFound
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return fmt.Errorf("%w: %w", ErrAlreadyExists, err)
	case errors.Is(err, gorm.ErrForeignKeyViolated):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case isUnavailable(err):
		return &unavailableError{cause: err}
	}
	return err
}

// normalize fills nil maps and puts times in UTC, so both engines store and
// return the same thing.
func normalize(in *record.Instance) {
	if in.Config == nil {
		in.Config = map[string]string{}
	}
	if in.Devices == nil {
		in.Devices = map[string]map[string]string{}
	}
	if in.StartedAt != nil {
		t := in.StartedAt.UTC()
		in.StartedAt = &t
	}
	in.CreatedAt = in.CreatedAt.UTC()
	in.UpdatedAt = in.UpdatedAt.UTC()
}

func validInstance(in *record.Instance) error {
	switch {
	case in == nil:
		return fmt.Errorf("nil instance: %w", ErrInvalid)
	case in.Name == "":
		return fmt.Errorf("instance without a name: %w", ErrInvalid)
	case in.UUID == "":
		return fmt.Errorf("instance %q without a uuid: %w", in.Name, ErrInvalid)
	}
	if err := checkInstance(in); err != nil {
		return fmt.Errorf("instance %q: %w", in.Name, err)
	}
	return nil
}

// CreateInstance stores a new instance and sets in.ID.
func (s *sqlStore) CreateInstance(ctx context.Context, in *record.Instance) error {
	if err := validInstance(in); err != nil {
		return fmt.Errorf("creating instance: %w", err)
	}
	normalize(in)
	l, err := s.heldLease()
	if err != nil {
		return fmt.Errorf("creating instance %q: %w", in.Name, translate(err))
	}
	row := instanceRowOf(in)
	err = s.w.do(ctx, false, func(tx *gorm.DB) error {
		row.ID = 0
		if l != nil {
			if err := s.checkLease(tx, l); err != nil {
				return err
			}
		}
		return tx.Create(row).Error
	})
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		in.ID = 0
		return s.nameTaken(ctx, in.Name)
	}
	if err != nil {
		in.ID = 0
		return fmt.Errorf("creating instance %q: %w", in.Name, translate(err))
	}
	*in = *row.record() // its ID and the times gorm set
	return nil
}

// nameTaken is the error of a create whose name another instance holds:
// which member it is on, and no driver text.
func (s *sqlStore) nameTaken(ctx context.Context, name string) error {
	if other, err := s.GetInstance(ctx, name); err == nil && other.Location != "" {
		return fmt.Errorf("instance %q exists already (on cluster member %s): %w", name, other.Location, ErrAlreadyExists)
	}
	return fmt.Errorf("instance %q exists already: %w", name, ErrAlreadyExists)
}

// GetInstance returns the instance called name.
func (s *sqlStore) GetInstance(ctx context.Context, name string) (*record.Instance, error) {
	var row instanceRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = retryRead(func() error { return rd.Where("name = ?", name).Take(&row).Error })
	}
	if err != nil {
		return nil, fmt.Errorf("getting instance %q: %w", name, translate(err))
	}
	in := row.record()
	normalize(in)
	return in, nil
}

// GetInstanceByUUID returns the instance whose UUID is uuid.
func (s *sqlStore) GetInstanceByUUID(ctx context.Context, uuid string) (*record.Instance, error) {
	var row instanceRow
	rd, err := s.reader(ctx)
	if err == nil {
		err = retryRead(func() error { return rd.Where("uuid = ?", uuid).Take(&row).Error })
	}
	if err != nil {
		return nil, fmt.Errorf("getting instance with uuid %q: %w", uuid, translate(err))
	}
	in := row.record()
	normalize(in)
	return in, nil
}

// ListInstances returns the instances matching f, ordered by name.
func (s *sqlStore) ListInstances(ctx context.Context, f record.Filter) ([]*record.Instance, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	q = q.Order("name")
	if f.Backend != "" {
		q = q.Where("backend = ?", f.Backend)
	}
	if f.PowerState != "" {
		q = q.Where("power_state = ?", f.PowerState)
	}
	if f.Location != "" {
		q = q.Where("location = ?", f.Location)
	}
	var rows []*instanceRow
	if err := retryRead(func() error { rows = nil; return q.Find(&rows).Error }); err != nil {
		return nil, fmt.Errorf("listing instances: %w", translate(err))
	}
	out := make([]*record.Instance, len(rows))
	for i, r := range rows {
		out[i] = r.record()
		normalize(out[i])
	}
	return out, nil
}

// updateInstance saves every field of in but its ID and CreatedAt; under a
// lease, only if the lease holds (leaseClause).
// instanceFixedColumns are the columns an instance update leaves alone:
// profiles change only through SetInstanceProfiles and RenameProfile, so a
// member whose cached record predates a rename never writes the old name
// back.
var instanceFixedColumns = []string{"id", "created_at", "profiles"}

func (s *sqlStore) updateInstance(tx *gorm.DB, l *lease, in *instanceRow) error {
	if l == nil {
		return affectedOne(tx.Model(in).Select("*").Omit(instanceFixedColumns...).Updates(in))
	}
	res := tx.Model(in).Where(leaseClause, l.Member, l.Member, l.Epoch).Select("*").Omit(instanceFixedColumns...).Updates(in)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return s.fenced(tx, l)
	}
	return nil
}

// UpdateInstance saves all fields of in (matched by ID).
func (s *sqlStore) UpdateInstance(ctx context.Context, in *record.Instance) error {
	return s.UpdateInstanceWithTimeline(ctx, in)
}

// UpdateInstanceWithTimeline saves in and appends entries in one
// transaction. An entry whose InstanceID is 0 is given in.ID.
func (s *sqlStore) UpdateInstanceWithTimeline(ctx context.Context, in *record.Instance, entries ...*record.TimelineEntry) error {
	if err := validInstance(in); err != nil {
		return fmt.Errorf("updating instance: %w", err)
	}
	if in.ID == 0 {
		return fmt.Errorf("updating instance %q: no id: %w", in.Name, ErrInvalid)
	}
	if err := prepareEntries(entries, in.ID); err != nil {
		return fmt.Errorf("updating instance %q: %w", in.Name, err)
	}
	normalize(in)
	l, err := s.heldLease()
	if err != nil {
		resetEntries(entries)
		return fmt.Errorf("updating instance %q: %w", in.Name, translate(err))
	}
	row := instanceRowOf(in)
	err = s.w.doAppend(ctx, false, entryInstances(entries), func(tx *gorm.DB) error {
		if err := s.updateInstance(tx, l, row); err != nil {
			return err
		}
		return s.prep.insertEntries(tx, entries)
	})
	in.UpdatedAt = row.UpdatedAt // set by gorm
	if err != nil {
		resetEntries(entries)
		return fmt.Errorf("updating instance %q: %w", in.Name, translate(err))
	}
	return nil
}

// DeleteInstance deletes the instance with the given id and its timeline.
func (s *sqlStore) DeleteInstance(ctx context.Context, id int64) error {
	l, err := s.heldLease()
	if err != nil {
		return fmt.Errorf("deleting instance %d: %w", id, translate(err))
	}
	err = s.w.do(ctx, false, func(tx *gorm.DB) error {
		if l == nil {
			return affectedOne(tx.Delete(&instanceRow{}, id))
		}
		res := tx.Where(leaseClause, l.Member, l.Member, l.Epoch).Delete(&instanceRow{}, id)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return s.fenced(tx, l)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting instance %d: %w", id, translate(err))
	}
	return nil
}

// prepareEntries checks entries and fills their defaults.
func prepareEntries(entries []*record.TimelineEntry, instanceID int64) error {
	for i, e := range entries {
		if e == nil {
			return fmt.Errorf("timeline entry %d is nil: %w", i, ErrInvalid)
		}
		if e.InstanceID == 0 {
			e.InstanceID = instanceID
		}
		if e.InstanceID == 0 {
			return fmt.Errorf("timeline entry %d has no instance: %w", i, ErrInvalid)
		}
		if err := checkEntry(e); err != nil {
			return fmt.Errorf("timeline entry %d: %w", i, err)
		}
		if e.Time.IsZero() {
			e.Time = now()
		}
		e.Time = e.Time.UTC()
	}
	return nil
}

// entryInstances returns the instance id of each entry.
func entryInstances(entries []*record.TimelineEntry) []int64 {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]int64, len(entries))
	for i, e := range entries {
		ids[i] = e.InstanceID
	}
	return ids
}

func resetEntries(entries []*record.TimelineEntry) {
	for _, e := range entries {
		if e != nil {
			e.ID = 0
		}
	}
}

// AppendTimeline appends entries (each naming its instance) and sets their IDs.
func (s *sqlStore) AppendTimeline(ctx context.Context, entries ...*record.TimelineEntry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := prepareEntries(entries, 0); err != nil {
		return fmt.Errorf("appending to timeline: %w", err)
	}
	err := s.w.doAppend(ctx, false, entryInstances(entries), func(tx *gorm.DB) error { return s.prep.insertEntries(tx, entries) })
	if err != nil {
		resetEntries(entries)
		return fmt.Errorf("appending to timeline of instance %d: %w", entries[0].InstanceID, translate(err))
	}
	return nil
}

// ListTimeline returns the last limit entries of an instance's timeline,
// oldest first; limit <= 0 returns them all.
func (s *sqlStore) ListTimeline(ctx context.Context, instanceID int64, limit int) ([]*record.TimelineEntry, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing timeline of instance %d: %w", instanceID, err)
	}
	q = q.Where("instance_id = ?", instanceID).
		Order(clause.OrderBy{Columns: []clause.OrderByColumn{
			{Column: clause.Column{Name: "time"}, Desc: true},
			{Column: clause.Column{Name: "id"}, Desc: true},
		}})
	if limit > 0 {
		q = q.Limit(limit)
	}
	var rows []*timelineRow
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing timeline of instance %d: %w", instanceID, translate(err))
	}
	slices.Reverse(rows)
	out := make([]*record.TimelineEntry, len(rows))
	for i, r := range rows {
		out[i] = r.record()
		out[i].Time = r.Time.UTC()
	}
	return out, nil
}

// LastBecameReady implements Store: one row, found from the newest entry
// backwards through the (instance_id, time) index.
func (s *sqlStore) LastBecameReady(ctx context.Context, instanceID, boot int64) (time.Time, bool, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reading when instance %d became Ready: %w", instanceID, err)
	}
	var out []timelineRow
	err = q.Where(map[string]any{"instance_id": instanceID, "boot": boot, "kind": "ready", "from": "false", "to": "true"}).
		Order(clause.OrderBy{Columns: []clause.OrderByColumn{
			{Column: clause.Column{Name: "time"}, Desc: true},
			{Column: clause.Column{Name: "id"}, Desc: true},
		}}).Limit(1).Find(&out).Error
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reading when instance %d became Ready: %w", instanceID, translate(err))
	}
	if len(out) == 0 {
		return time.Time{}, false, nil
	}
	return out[0].Time.UTC(), true, nil
}

// ClearReadyAll removes volatile.last_state.ready from every instance's
// config and returns how many instances changed. It reads and rewrites the
// candidate rows in one transaction (locking them on PostgreSQL); the JSON
// text only preselects candidates, the decoded config decides.
func (s *sqlStore) ClearReadyAll(ctx context.Context) (int, error) {
	return s.ClearReadyAt(ctx, "")
}

// ClearReadyAt is ClearReadyAll for the instances located on one cluster
// member ("" means all).
func (s *sqlStore) ClearReadyAt(ctx context.Context, location string) (int, error) {
	var changed int
	l, err := s.heldLease()
	if err != nil {
		return 0, fmt.Errorf("clearing ready flags: %w", translate(err))
	}
	err = s.w.do(ctx, false, func(tx *gorm.DB) error {
		changed = 0
		if l != nil {
			if err := s.checkLease(tx, l); err != nil {
				return err
			}
		}
		type row struct {
			ID     int64
			Config map[string]string `gorm:"serializer:json"`
		}
		q := tx.Model(&instanceRow{}).Select("id", "config").
			Where("config LIKE ?", `%"`+readyKey+`"%`).Order("id")
		if location != "" {
			q = q.Where("location = ?", location)
		}
		if s.engine == EnginePostgres {
			q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
		}
		var rows []row
		if err := q.Find(&rows).Error; err != nil {
			return err
		}
		ts := now()
		for _, r := range rows {
			if _, ok := r.Config[readyKey]; !ok {
				continue
			}
			delete(r.Config, readyKey)
			cfg, err := json.Marshal(r.Config)
			if err != nil {
				return fmt.Errorf("encoding config of instance %d: %w", r.ID, err)
			}
			res := tx.Model(&instanceRow{}).Where("id = ?", r.ID).
				UpdateColumns(map[string]any{"config": string(cfg), "updated_at": ts})
			if res.Error != nil {
				return res.Error
			}
			changed += int(res.RowsAffected)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("clearing ready flags: %w", translate(err))
	}
	return changed, nil
}

// AppendEvent appends ev to the event log and sets ev.ID (and ev.Time if zero).
func (s *sqlStore) AppendEvent(ctx context.Context, ev *events.Record) error {
	if ev == nil {
		return fmt.Errorf("appending event: nil event: %w", ErrInvalid)
	}
	if ev.Type == "" {
		return fmt.Errorf("appending event: no type: %w", ErrInvalid)
	}
	if err := checkEvent(ev); err != nil {
		return fmt.Errorf("appending %s event: %w", ev.Type, err)
	}
	if ev.Time.IsZero() {
		ev.Time = now()
	}
	ev.Time = ev.Time.UTC()
	if ev.Body == nil {
		ev.Body = []byte{}
	}
	err := s.w.do(ctx, true, func(tx *gorm.DB) error {
		ev.ID = 0
		s.w.noteEvent(ev.Instance) // per-instance retention (retention.go)
		return s.prep.insertEvent(tx, ev)
	})
	if err != nil {
		ev.ID = 0
		return fmt.Errorf("appending %s event: %w", ev.Type, translate(err))
	}
	return nil
}

// EventsAfter returns up to limit events with ID > after, oldest first;
// limit <= 0 returns them all.
func (s *sqlStore) EventsAfter(ctx context.Context, after int64, limit int) ([]*events.Record, error) {
	q, err := s.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading events after %d: %w", after, err)
	}
	q = q.Where("id > ?", after).Order("id")
	if limit > 0 {
		q = q.Limit(limit)
	}
	var rows []*eventRow
	if err := retryRead(func() error { rows = nil; return q.Find(&rows).Error }); err != nil {
		return nil, fmt.Errorf("reading events after %d: %w", after, translate(err))
	}
	out := make([]*events.Record, len(rows))
	for i, r := range rows {
		out[i] = r.record()
		out[i].Time = r.Time.UTC()
	}
	return out, nil
}

// LastEventID returns the highest event id, or 0 if the log is empty.
func (s *sqlStore) LastEventID(ctx context.Context) (int64, error) {
	var id int64
	rd, err := s.reader(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading last event id: %w", err)
	}
	if err := rd.Model(&eventRow{}).Select("COALESCE(MAX(id), 0)").Scan(&id).Error; err != nil {
		return 0, fmt.Errorf("reading last event id: %w", translate(err))
	}
	return id, nil
}

// CloseWrites ends the store's writes, as a daemon's stop begins: the
// transaction in flight finishes (what it commits stays committed), every
// write call that had not started, queued or still waiting to be, and
// every later one fails with ErrClosed. Reads go on until Close. A stop
// then waits for no backlog of writes: the callers (a guest's declaration,
// an agent's state) get an error they handle: nothing of theirs was
// recorded (a guest that declares again reaches the next daemon; an
// agent's state is taken anew when the next daemon's monitor starts).
func (s *sqlStore) CloseWrites() { s.w.close() }

// Close ends the writes as CloseWrites does, then closes the database.
// Later calls return ErrClosed; Close itself may be called more than once.
func (s *sqlStore) Close() error {
	s.closeOnce.Do(func() {
		start := time.Now()
		s.closed.Store(true)
		s.w.close()
		s.prep.close()
		var errs []error
		if s.ckpt != nil {
			s.ckpt.close()
			errs = append(errs, s.ckpt.db.Close())
		}
		// The last connection closed checkpoints the WAL and removes it.
		for _, g := range []*gorm.DB{s.db, s.wdb} {
			sqlDB, err := g.DB()
			if err == nil {
				err = sqlDB.Close()
			}
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("closing database %q: %w", s.name, err)
		}
		if s.log != nil {
			s.log.Info("database closed", "database", s.name, "elapsed", time.Since(start))
		}
	})
	return s.closeErr
}

// affectedOne is the error of a write that must change a row: the
// statement's error, gorm.ErrRecordNotFound (translated to ErrNotFound) if
// it changed none.
func affectedOne(res *gorm.DB) error {
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return gorm.ErrRecordNotFound
	}
	return nil
}
