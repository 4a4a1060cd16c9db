package db

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/guestlink/guestlink/core/instance/record"
)

// An instance write whose caller gives the record it changed (prev: what
// it last read from or wrote to the store) is a narrow update: it writes
// only the columns in which the new record differs from prev, and
// updated_at, where the full update (updateInstance) writes every column.
// A Ready declaration changes only the config (volatile.last_state.ready):
// the full update had gorm build the statement each time, SQLite parse it,
// write every column and rewrite the indexes on backend, power state and
// location, about 28 % of a declaration storm's CPU.
//
// updated_at is the row's version: a narrow update applies only where the
// row's updated_at is still prev's (WHERE id = ? AND updated_at = ?), so a
// diff is never written onto a row that changed since prev was read. Where
// it matches no row (another writer changed the row, the instance is gone,
// a cluster member's lease is lost), the full update runs instead in the
// same transaction: the row ends as the full update leaves it, as before
// (the new record, or ErrNotFound, or the lease's error).

// instCols is a set of the instances columns a narrow update may write.
type instCols uint16

const (
	colName instCols = 1 << iota
	colUUID
	colBackend
	colConfig
	colDevices
	colHandle
	colPowerState
	colBoot
	colLocation
	colStartedAt
	numInstCols = iota
)

// instColNames are the columns' names, in the bits' order.
var instColNames = [numInstCols]string{
	"name", "uuid", "backend", "config", "devices", "handle", "power_state", "boot", "location", "started_at",
}

// changedCols returns the columns in which in differs from prev (both
// normalized). ID, CreatedAt and Profiles are never written by an update
// (instanceFixedColumns); UpdatedAt always is.
func changedCols(prev, in *record.Instance) instCols {
	var c instCols
	if prev.Name != in.Name {
		c |= colName
	}
	if prev.UUID != in.UUID {
		c |= colUUID
	}
	if prev.Backend != in.Backend {
		c |= colBackend
	}
	if !maps.Equal(prev.Config, in.Config) {
		c |= colConfig
	}
	if !maps.EqualFunc(prev.Devices, in.Devices, func(a, b map[string]string) bool { return maps.Equal(a, b) }) {
		c |= colDevices
	}
	if !bytes.Equal(prev.Handle, in.Handle) || (prev.Handle == nil) != (in.Handle == nil) {
		c |= colHandle
	}
	if prev.PowerState != in.PowerState {
		c |= colPowerState
	}
	if prev.Boot != in.Boot {
		c |= colBoot
	}
	if prev.Location != in.Location {
		c |= colLocation
	}
	switch {
	case (prev.StartedAt == nil) != (in.StartedAt == nil):
		c |= colStartedAt
	case prev.StartedAt != nil && !prev.StartedAt.Equal(*in.StartedAt):
		c |= colStartedAt
	}
	return c
}

// narrowSQL is the narrow UPDATE of cols on engine; its arguments are the
// columns' values in the bits' order, the new updated_at, the id, prev's
// updated_at and, leased, leaseClause's (member, member and epoch).
func narrowSQL(engine string, cols instCols, leased bool) string {
	var b strings.Builder
	b.WriteString(`UPDATE "instances" SET `)
	for i, name := range instColNames {
		if cols&(1<<i) != 0 {
			fmt.Fprintf(&b, "%q=?,", name)
		}
	}
	b.WriteString(`"updated_at"=? WHERE "id"=? AND "updated_at"=?`)
	if leased {
		b.WriteString(" AND " + leaseClause)
	}
	q := b.String()
	if engine != EnginePostgres {
		return q
	}
	// PostgreSQL's placeholders are numbered ($1, $2, ...); the
	// statement holds no other '?'.
	var pg strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			pg.WriteString("$" + strconv.Itoa(n))
			continue
		}
		pg.WriteRune(r)
	}
	return pg.String()
}

// narrowArgs returns the arguments of narrowSQL for in, as gorm passes
// them for the same columns (so both updates store the same values).
func narrowArgs(cols instCols, in *record.Instance, updated, prevUpdated time.Time, l *lease) ([]any, error) {
	args := make([]any, 0, numInstCols+6)
	for i := range numInstCols {
		c := instCols(1) << i
		if cols&c == 0 {
			continue
		}
		switch c {
		case colName:
			args = append(args, in.Name)
		case colUUID:
			args = append(args, in.UUID)
		case colBackend:
			args = append(args, in.Backend)
		case colConfig:
			js, err := json.Marshal(in.Config)
			if err != nil {
				return nil, fmt.Errorf("encoding config: %w", err)
			}
			args = append(args, string(js))
		case colDevices:
			js, err := json.Marshal(in.Devices)
			if err != nil {
				return nil, fmt.Errorf("encoding devices: %w", err)
			}
			args = append(args, string(js))
		case colHandle:
			args = append(args, in.Handle)
		case colPowerState:
			args = append(args, in.PowerState)
		case colBoot:
			args = append(args, in.Boot)
		case colLocation:
			args = append(args, in.Location)
		case colStartedAt:
			if in.StartedAt == nil {
				args = append(args, nil)
			} else {
				args = append(args, *in.StartedAt)
			}
		}
	}
	args = append(args, updated, in.ID, prevUpdated)
	if l != nil {
		args = append(args, l.Member, l.Member, l.Epoch)
	}
	return args, nil
}

// narrowUpdate is one narrow update, made by WriteChangeFrom before its
// call is queued: the columns, the statement's arguments and the row's new
// updated_at.
type narrowUpdate struct {
	cols    instCols
	args    []any
	updated time.Time
}

// nextVersion is the updated_at a write after prev gives the row: now,
// but always later than prev's (the Store's clock has microseconds; two
// writes in one microsecond must still differ).
func nextVersion(prev time.Time) time.Time {
	t := now()
	if !t.After(prev) {
		t = prev.Add(time.Microsecond)
	}
	return t
}

// narrowUpdateTx runs the narrow update u in tx and reports whether it changed the
// row (false: no row had prev's version, or the lease did not hold).
func (s *sqlStore) narrowUpdateTx(tx *gorm.DB, l *lease, u *narrowUpdate) (bool, error) {
	sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return false, fmt.Errorf("writer transaction is a %T, not *sql.Tx", tx.Statement.ConnPool)
	}
	ctx := tx.Statement.Context
	var res sql.Result
	var err error
	if st := s.prep.updateStmt(u.cols, l != nil); st != nil {
		// Bound to the transaction's connection, where it is already
		// prepared (or prepared again on a new connection after a
		// reconnect: database/sql does it).
		txst := sqlTx.StmtContext(ctx, st)
		res, err = txst.ExecContext(ctx, u.args...)
		txst.Close()
	} else {
		res, err = sqlTx.ExecContext(ctx, s.prep.updateSQL(u.cols, l != nil), u.args...)
	}
	if err != nil {
		return false, translateDriver(tx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, translateDriver(tx, err)
	}
	return n == 1, nil
}
