package db

import "database/sql"

// MigrationCount is how many migrations the schema history holds.
var MigrationCount = len(migrations())

// ExecForBench runs a statement on s's writer connection, outside the
// group-commit writer: only while nothing else writes.
func ExecForBench(s Store, sql string, args ...any) error {
	return s.(*sqlStore).wdb.Exec(sql, args...).Error
}

// PruneEventsSQL returns the global event prune of an engine (retention.go).
func PruneEventsSQL(engine string) string {
	if engine == EnginePostgres {
		return pruneEventsPostgres
	}
	return pruneEventsSQL
}

// ReaderPoolForTest returns s's reader pool (database/sql), for a test that
// fills it with idle connections.
func ReaderPoolForTest(s Store) (*sql.DB, error) { return s.(*sqlStore).db.DB() }
