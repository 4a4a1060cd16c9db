package db

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/instance/record"
)

// prepared holds the writer connection's prepared statements for the most
// frequent writes: timeline and event inserts, and the narrow update of an
// instance's config (a Ready declaration's, narrow.go). gorm cannot keep
// prepared statements across transactions, so without these SQLite parses
// every statement again. Statements are prepared on the writer's pool (one
// connection), so a transaction reuses them without re-preparing. After
// prepare, only the writer goroutine uses a prepared.
type prepared struct {
	db     *sql.DB
	engine string
	event  *sql.Stmt
	entry  *sql.Stmt
	// config and configLeased are the narrow update of the config alone,
	// without and with the cluster lease's condition (PostgreSQL only).
	config       *sql.Stmt
	configLeased *sql.Stmt
	// updates caches the text of the other narrow updates, by columns
	// and lease (bit 15); run unprepared on SQLite (pgx caches each
	// statement it runs on a connection prepared).
	updates map[instCols]string
}

// leasedBit marks a leased narrow update in prepared.updates.
const leasedBit instCols = 1 << 15

const (
	insertEventSQLite = `INSERT INTO "events" ("time","type","instance","body") VALUES (?,?,?,?)`
	insertEventPG     = `INSERT INTO "events" ("time","type","instance","body") VALUES ($1,$2,$3,$4) RETURNING "id"`
	insertEntrySQLite = `INSERT INTO "timeline_entries" ("instance_id","time","boot","kind","from","to","cause","detail") VALUES (?,?,?,?,?,?,?,?)`
	insertEntryPG     = `INSERT INTO "timeline_entries" ("instance_id","time","boot","kind","from","to","cause","detail") VALUES ($1,$2,$3,$4,$5,$6,$7,$8) RETURNING "id"`
)

// prepare prepares the statements. It must run while the writer's one
// connection is free (before the writer starts): a later prepare on the
// pool would wait for the connection its own transaction holds.
func (p *prepared) prepare(ctx context.Context) error {
	queries := []struct {
		slot       **sql.Stmt
		sqlite, pg string
	}{
		{&p.event, insertEventSQLite, insertEventPG},
		{&p.entry, insertEntrySQLite, insertEntryPG},
		{&p.config, narrowSQL(EngineSQLite, colConfig, false), narrowSQL(EnginePostgres, colConfig, false)},
		// The lease's condition takes FOR SHARE, PostgreSQL's (a
		// cluster's database is PostgreSQL).
		{&p.configLeased, "", narrowSQL(EnginePostgres, colConfig, true)},
	}
	for _, q := range queries {
		query := q.sqlite
		if p.engine == EnginePostgres {
			query = q.pg
		}
		if query == "" {
			continue
		}
		st, err := p.db.PrepareContext(ctx, query)
		if err != nil {
			p.close()
			return fmt.Errorf("preparing statements: %w", err)
		}
		*q.slot = st
	}
	return nil
}

// insert runs an INSERT statement and returns the new row's id.
func (p *prepared) insert(ctx context.Context, tx *gorm.DB, prepared *sql.Stmt, args ...any) (int64, error) {
	sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return 0, fmt.Errorf("writer transaction is a %T, not *sql.Tx", tx.Statement.ConnPool)
	}
	// Bound to the transaction's connection, where it is already prepared.
	st := sqlTx.StmtContext(ctx, prepared)
	defer st.Close()
	var id int64
	var err error
	if p.engine == EnginePostgres {
		err = st.QueryRowContext(ctx, args...).Scan(&id)
	} else {
		var res sql.Result
		if res, err = st.ExecContext(ctx, args...); err == nil {
			id, err = res.LastInsertId()
		}
	}
	if err != nil {
		return 0, translateDriver(tx, err)
	}
	return id, nil
}

// translateDriver maps a driver error to gorm's kinds, as gorm does for its
// own statements.
func translateDriver(tx *gorm.DB, err error) error {
	if t, ok := tx.Dialector.(gorm.ErrorTranslator); ok {
		return t.Translate(err)
	}
	return err
}

// insertEvent inserts ev and sets its ID.
func (p *prepared) insertEvent(tx *gorm.DB, ev *events.Record) error {
	id, err := p.insert(tx.Statement.Context, tx, p.event,
		ev.Time, ev.Type, ev.Instance, ev.Body)
	if err != nil {
		return err
	}
	ev.ID = id
	return nil
}

// insertEntries inserts entries one by one and sets their IDs.
func (p *prepared) insertEntries(tx *gorm.DB, entries []*record.TimelineEntry) error {
	resetEntries(entries)
	for _, e := range entries {
		id, err := p.insert(tx.Statement.Context, tx, p.entry,
			e.InstanceID, e.Time, e.Boot, e.Kind, e.From, e.To, e.Cause, e.Detail)
		if err != nil {
			resetEntries(entries)
			return err
		}
		e.ID = id
	}
	return nil
}

// updateStmt returns the prepared narrow update of cols, or nil when it
// is not prepared.
func (p *prepared) updateStmt(cols instCols, leased bool) *sql.Stmt {
	if cols != colConfig {
		return nil
	}
	if leased {
		return p.configLeased
	}
	return p.config
}

// updateSQL returns the text of the narrow update of cols (made once per
// set of columns; only the writer's goroutine calls it).
func (p *prepared) updateSQL(cols instCols, leased bool) string {
	key := cols
	if leased {
		key |= leasedBit
	}
	q, ok := p.updates[key]
	if !ok {
		if p.updates == nil {
			p.updates = map[instCols]string{}
		}
		q = narrowSQL(p.engine, cols, leased)
		p.updates[key] = q
	}
	return q
}

// close releases the statements.
func (p *prepared) close() {
	for _, slot := range []**sql.Stmt{&p.event, &p.entry, &p.config, &p.configLeased} {
		if *slot != nil {
			(*slot).Close()
			*slot = nil
		}
	}
}
