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

// BackendPIDsForBench returns the process ids of the PostgreSQL server's
// backends serving s's database (every connection of s's pools), for a
// benchmark that reads their CPU time.
func BackendPIDsForBench(s Store) ([]int, error) {
	var pids []int
	err := s.(*sqlStore).db.Raw("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'").Scan(&pids).Error
	return pids, err
}
