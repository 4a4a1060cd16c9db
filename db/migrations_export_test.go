package db

// MigrationCount is how many migrations this binary knows, for the
// external tests (one row each in the migrations table).
var MigrationCount = len(migrations())
