package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	gosqlite "github.com/glebarez/go-sqlite"
	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/guestlink/guestlink/errdefs"
)

// DefaultFileName is the SQLite database's file name inside the state directory.
const DefaultFileName = "guestlink.db"

// Engine names, used in log lines and as dbtest's engine names.
const (
	EngineSQLite   = "sqlite"
	EnginePostgres = "postgres"
)

// ErrInvalidURL is returned (wrapped) by Open for a database URL it cannot use.
var ErrInvalidURL = errors.New("invalid database url")

// ErrClosed is returned (wrapped) by a Store's methods after Close. It
// wraps errdefs.ErrClosed, the kind the services test.
var ErrClosed = fmt.Errorf("store %w", errdefs.ErrClosed)

// options are Open's settings; see the Option functions.
type options struct {
	stateDir    string
	logger      *slog.Logger
	maxBatch    int
	busyTimeout time.Duration
	keep        retention

	// SQLite checkpoints (checkpoint.go); tests change them.
	walPassive, walBound int  // pages; 0: walPassiveAt, walBound
	autoCheckpoint       bool // SQLite's own, on the commit path (for comparison)
	// trace, if set, is called by the writer's goroutine before (commit
	// false) and after (commit true) each batch's transactions (tests).
	trace func(batch []*writeOp, commit bool)
}

// Option changes how Open opens a Store.
type Option func(*options)

// WithStateDir sets the daemon's state directory: an empty URL then opens
// DefaultURL(dir). Without it an empty URL is refused. Relative SQLite paths
// are always relative to the working directory.
func WithStateDir(dir string) Option { return func(o *options) { o.stateDir = dir } }

// WithLogger sets the logger for the Store's opening and closing, slow
// statements (warn) and failed statements (debug). Without it the Store
// logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRetention sets how much history the Store keeps: the newest
// timelinePerInstance timeline entries of each instance (default
// DefaultTimelineRetention) and the newest events (default
// DefaultEventRetention). Older ones are deleted by the writer in the
// background, a few appends past each limit (a tenth of it), so the tables
// stay bounded whatever guests make the daemon record; an event subscriber
// resuming from a pruned id gets the oldest events kept. Zero or less keeps
// a default.
func WithRetention(timelinePerInstance, events int) Option {
	return func(o *options) {
		if timelinePerInstance > 0 {
			o.keep.timeline = timelinePerInstance
		}
		if events > 0 {
			o.keep.events = events
		}
	}
}

// WithMaxBatch sets how many queued write calls the group-commit writer may
// commit in one transaction (default sqliteMaxBatch on SQLite,
// postgresMaxBatch on PostgreSQL; 1 disables batching).
func WithMaxBatch(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxBatch = n
		}
	}
}

// Default batch sizes of the group-commit writer. On SQLite a storm of
// 10,000 Ready declarations (BenchmarkDeclarationStorm) took 10 batches of
// about 970 calls with 1,024 instead of 40 of 248 with 256: 8-10 % less CPU
// per declaration and fewer WAL pages to checkpoint (pages shared by the
// calls of a batch are written once). PostgreSQL keeps 256.
const (
	sqliteMaxBatch   = 1024
	postgresMaxBatch = 256
)

// DefaultURL returns the database URL the daemon uses when --database is not
// given: a SQLite file named DefaultFileName in stateDir.
func DefaultURL(stateDir string) string {
	return "sqlite://" + filepath.Join(stateDir, DefaultFileName)
}

// Open opens (creating it if needed) the database at url, brings its schema
// up to date with the versioned migrations and returns a Store. It is safe
// for several processes to Open the same database at once.
//
// URL forms:
//
//	""                         DefaultURL of WithStateDir's directory
//	sqlite:///abs/path.db      SQLite file (sqlite://rel/path.db is relative)
//	/abs/path.db, rel/path.db  SQLite file
//	postgres://... postgresql://...  PostgreSQL (pgx); any libpq URL parameters
//
// SQLite files are created 0600 and opened in WAL mode with
// synchronous=FULL, so a nil return from a write means the change survives
// a crash of the process or of the machine.
func Open(ctx context.Context, url string, opts ...Option) (Store, error) {
	o := options{busyTimeout: 10 * time.Second,
		keep: retention{timeline: DefaultTimelineRetention, events: DefaultEventRetention, instanceEvents: DefaultInstanceEventRetention,
			floor: DefaultInstanceEventFloor}}
	for _, opt := range opts {
		opt(&o)
	}
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		o.maxBatch = cmp.Or(o.maxBatch, postgresMaxBatch)
		return openPostgres(ctx, url, &o)
	}
	o.maxBatch = cmp.Or(o.maxBatch, sqliteMaxBatch)
	path, err := sqlitePath(url, o.stateDir)
	if err != nil {
		return nil, err
	}
	return openSQLite(ctx, path, &o)
}

// sqlitePath turns a non-PostgreSQL database URL into a file path.
func sqlitePath(u, stateDir string) (string, error) {
	path := u
	switch {
	case u == "":
		if stateDir == "" {
			return "", fmt.Errorf("opening database: empty url and no state directory: %w", ErrInvalidURL)
		}
		return filepath.Join(stateDir, DefaultFileName), nil
	case strings.HasPrefix(u, "sqlite://"):
		path = strings.TrimPrefix(u, "sqlite://")
	case strings.Contains(u, "://"):
		scheme, _, _ := strings.Cut(u, "://")
		return "", fmt.Errorf("opening database %q: unknown scheme %q (want sqlite:// or postgres://): %w", u, scheme, ErrInvalidURL)
	}
	if path == "" {
		return "", fmt.Errorf("opening database %q: no file path: %w", u, ErrInvalidURL)
	}
	if strings.ContainsAny(path, "?#\x00") || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return "", fmt.Errorf("opening database %q: path must be a plain file path: %w", u, ErrInvalidURL)
	}
	return filepath.Clean(path), nil
}

// sqliteDSN is the glebarez/go-sqlite DSN for path. The pragmas are applied
// to every new connection (the driver runs each _pragma when it opens a
// connection, for every connection of every pool): they are per-connection
// settings. With walLimit > 0, no connection checkpoints on commit and the
// commit that restarts the WAL truncates its file to walLimit bytes
// (checkpoint.go); with 0, SQLite checkpoints on commit.
func sqliteDSN(path string, busy time.Duration, walLimit int64) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if walLimit > 0 {
		q.Add("_pragma", "wal_autocheckpoint(0)")
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walLimit))
	}
	// Write transactions take the write lock at BEGIN, so two writers
	// never deadlock on a lock upgrade (which busy_timeout cannot resolve).
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode()
}

func openSQLite(ctx context.Context, path string, o *options) (Store, error) {
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("opening database %q: %w", path, err)
	}
	// The WAL's size limit is half the PASSIVE threshold, so that a WAL
	// file truncated to it reads as below the threshold (checkpoint.go).
	var walLimit int64
	if !o.autoCheckpoint {
		walLimit = walSizeLimit(min(cmp.Or(o.walPassive, walPassiveAt), cmp.Or(o.walBound, walBound)))
	}
	dsn := sqliteDSN(path, o.busyTimeout, walLimit)
	// Readers run concurrently under WAL. All writes go through the single
	// group-commit writer on its own connection, whose page cache then
	// stays warm (no other connection of ours changes the file). The
	// checkpointer has a connection of its own (checkpoint.go).
	ckpt := func(pageSize int) (*checkpointer, *sql.DB, error) {
		if o.autoCheckpoint {
			return nil, nil, nil
		}
		cdb, err := sql.Open(sqlite.DriverName, sqliteDSN(path, checkpointBusy, walLimit))
		if err != nil {
			return nil, nil, err
		}
		cdb.SetMaxOpenConns(1)
		cdb.SetMaxIdleConns(1)
		cdb.SetConnMaxIdleTime(0)
		if err := cdb.PingContext(ctx); err != nil {
			cdb.Close()
			return nil, nil, err
		}
		passive, bound := cmp.Or(o.walPassive, walPassiveAt), cmp.Or(o.walBound, walBound)
		return newCheckpointer(cdb, path+"-wal", pageSize, passive, bound, o.logger), cdb, nil
	}
	open := func() (Store, error) {
		return openPair(ctx, func() gorm.Dialector { return sqliteDialector{sqlite.Dialector{DSN: dsn}} }, EngineSQLite, path, 8, ckpt, o)
	}
	// Connections opening a new database at the same moment (several
	// daemons, or a daemon and the CLI) can get SQLITE_BUSY while one of
	// them switches the file to WAL: SQLite does not wait on busy_timeout
	// there. Retry the whole open for up to the busy timeout.
	deadline := time.Now().Add(o.busyTimeout)
	bo := busyBackoff()
	for {
		s, err := open()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("opening database %q: %w (after %w)", path, ctx.Err(), err)
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// busyBackoff returns the waits between attempts to open a busy SQLite
// database: d = 5 ms doubling up to 200 ms, each plus up to d again of
// jitter. backoff's interval is 1.5 d with a randomization factor of 1/3, so
// it draws from the same [d, 2d] range.
func busyBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: 7500 * time.Microsecond, RandomizationFactor: 1.0 / 3, Multiplier: 2, MaxInterval: 300 * time.Millisecond}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var serr *gosqlite.Error
	return errors.As(err, &serr) && serr.Code()&0xff == sqlite3.SQLITE_BUSY
}

// sqliteDialector is glebarez/sqlite's dialector without INSERT ...
// RETURNING: SQLite runs RETURNING like a trigger, which makes every insert
// inside a transaction keep a statement journal (a 64 KiB buffer mapped and
// unmapped per statement by the pure-Go allocator). Ids come from
// last_insert_rowid instead, which is exact for our single-writer inserts.
type sqliteDialector struct {
	sqlite.Dialector
}

// Initialize opens the connection pool and registers gorm's callbacks.
func (d sqliteDialector) Initialize(db *gorm.DB) error {
	conn, err := sql.Open(sqlite.DriverName, d.DSN)
	if err != nil {
		return err
	}
	db.ConnPool = conn
	callbacks.RegisterDefaultCallbacks(db, &callbacks.Config{LastInsertIDReversed: true})
	for k, v := range d.ClauseBuilders() {
		db.ClauseBuilders[k] = v
	}
	return nil
}

func openPostgres(ctx context.Context, dsn string, o *options) (Store, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening database: parsing postgres url: %w", ErrInvalidURL)
	}
	u.User = nil // never log a password
	return openPair(ctx, func() gorm.Dialector { return postgres.Open(dsn) }, EnginePostgres, u.Redacted(), 16, nil, o)
}

// checkpointerFunc starts a SQLite store's checkpointer for a database of
// pageSize-byte pages, on a pool of its own that it returns too (nil, nil:
// SQLite checkpoints on commit).
type checkpointerFunc func(pageSize int) (*checkpointer, *sql.DB, error)

// openPair opens the reader pool (readers connections) and the writer's
// single connection, checks them, migrates the schema and starts the store,
// with its checkpointer if ckpt is not nil.
func openPair(ctx context.Context, dialector func() gorm.Dialector, engine, name string, readers int, ckpt checkpointerFunc, o *options) (_ Store, err error) {
	var pools []*sql.DB
	defer func() {
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
		}
	}()
	var handles [2]*gorm.DB
	for i, conns := range []int{readers, 1} {
		g, err := gorm.Open(dialector(), gormConfig(o))
		if err != nil {
			return nil, fmt.Errorf("opening database %q: %w", name, err)
		}
		sqlDB, err := g.DB()
		if err != nil {
			return nil, fmt.Errorf("opening database %q: %w", name, err)
		}
		pools = append(pools, sqlDB)
		sqlDB.SetMaxOpenConns(conns)
		sqlDB.SetMaxIdleConns(conns)
		if err := sqlDB.PingContext(ctx); err != nil {
			return nil, fmt.Errorf("opening database %q: %w", name, err)
		}
		if engine == EngineSQLite {
			if err := checkPragmas(ctx, g, !o.autoCheckpoint); err != nil {
				return nil, fmt.Errorf("opening database %q: %w", name, err)
			}
		}
		handles[i] = g
	}
	var c *checkpointer
	if ckpt != nil {
		var pageSize int
		if err := handles[1].WithContext(ctx).Raw("PRAGMA page_size").Scan(&pageSize).Error; err != nil {
			return nil, fmt.Errorf("opening database %q: reading the page size: %w", name, err)
		}
		var cdb *sql.DB
		if c, cdb, err = ckpt(pageSize); err != nil {
			return nil, fmt.Errorf("opening database %q: opening the checkpointer's connection: %w", name, err)
		}
		if c != nil {
			pools = append(pools, cdb)
			defer func() {
				if err != nil {
					c.close()
				}
			}()
		}
	}
	s, err := newStore(ctx, handles[0], handles[1], c, engine, name, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// checkPragmas verifies that a SQLite connection got the settings of its
// DSN; durability depends on them, and (manualCheckpoints) the writer's
// commits on no checkpoint.
func checkPragmas(ctx context.Context, g *gorm.DB, manualCheckpoints bool) error {
	var mode string
	var sync, fk, auto int
	err := g.WithContext(ctx).Connection(func(c *gorm.DB) error {
		return errors.Join(
			c.Raw("PRAGMA journal_mode").Scan(&mode).Error,
			c.Raw("PRAGMA synchronous").Scan(&sync).Error,
			c.Raw("PRAGMA foreign_keys").Scan(&fk).Error,
			c.Raw("PRAGMA wal_autocheckpoint").Scan(&auto).Error,
		)
	})
	switch {
	case err != nil:
		return fmt.Errorf("reading connection settings: %w", err)
	case !strings.EqualFold(mode, "wal"):
		return fmt.Errorf("journal mode is %q, want wal", mode)
	case sync != 2:
		return fmt.Errorf("synchronous is %d, want 2 (full)", sync)
	case fk != 1:
		return errors.New("foreign keys are off")
	case manualCheckpoints && auto != 0:
		return fmt.Errorf("wal_autocheckpoint is %d, want 0 (checkpoints off the commit path)", auto)
	}
	return nil
}

// createPrivate makes sure the database file exists with mode 0600 before
// SQLite opens it (SQLite gives its -wal and -shm files the same mode).
func createPrivate(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// Never open the database file itself: closing any descriptor of a
	// file drops every POSIX lock this process holds on it, including
	// those of SQLite connections another Store already has open. A new
	// file is created under a temporary name and linked into place.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
		if err != nil {
			return err
		}
		tmp := f.Name()
		err = f.Chmod(0o600)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Link(tmp, path)
			if errors.Is(err, fs.ErrExist) {
				err = nil // another process created it meanwhile
			}
		}
		if rerr := os.Remove(tmp); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if errors.Is(err, fs.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path+suffix, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

func gormConfig(o *options) *gorm.Config {
	return &gorm.Config{
		SkipDefaultTransaction: true, // writes use explicit transactions
		TranslateError:         true,
		NowFunc:                now,
		Logger:                 newGormLogger(o.logger),
	}
}

// now is the Store's clock: UTC, at the microsecond precision both engines keep.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
