package db_test

import (
	"testing"
	"time"

	"github.com/guestlink/guestlink/db"
	"github.com/guestlink/guestlink/db/dbtest"
)

// BenchmarkPruneEventsFloor10k measures one global event prune at the
// design point: 10,000 instances whose newest 100 events each (the default
// floor) are out of the global limit's reach, a log of 1.1 million events,
// and one busy instance adding a prune's worth (10,000, the slack of the
// default global limit of 100,000) before each prune, which then deletes
// them. Only the prune is timed; cpu-ms/prune is this process's CPU, so
// SQLite's work alone (the machine's load does not count in it).
func BenchmarkPruneEventsFloor10k(b *testing.B) {
	const instances, perInstance = 10000, 110
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := dbtest.Open(b, e.URL(b), db.WithMaxBatch(1024))
			fill(b, s, instances)
			// i00000..i09999 as fill names them, round robin.
			name := `printf('i%05d', "n" % 10000)`
			series := `WITH RECURSIVE "s"("n") AS (SELECT 0 UNION ALL SELECT "n" + 1 FROM "s" WHERE "n" < ? - 1) `
			if e.Name == db.EnginePostgres {
				name = `'i' || lpad(("n" % 10000)::text, 5, '0')`
				series = `WITH "s"("n") AS (SELECT generate_series(0, ? - 1)) `
			}
			insert := func(n int, instance string) {
				b.Helper()
				who := name
				if instance != "" {
					who = "'" + instance + "'"
				}
				err := db.ExecForBench(s, series+`INSERT INTO "events" ("time", "type", "instance", "body") `+
					`SELECT ?, 'lifecycle', `+who+`, ? FROM "s"`, n, time.Now().UTC(), []byte("{}"))
				if err != nil {
					b.Fatal(err)
				}
			}
			insert(instances*perInstance, "")
			prune := func() {
				b.Helper()
				if err := db.ExecForBench(s, db.PruneEventsSQL(e.Name), db.DefaultEventRetention-1, db.DefaultInstanceEventFloor-1); err != nil {
					b.Fatal(err)
				}
			}
			prune() // the 10 oldest of each instance go: the steady state
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				insert(db.DefaultEventRetention/10, "i00000")
				cpu0 := processCPU()
				b.StartTimer()
				prune()
				cpu += processCPU() - cpu0
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/prune")
			// The CPU of this process: SQLite's work, not PostgreSQL's.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/prune")
		})
	}
}
