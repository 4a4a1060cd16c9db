package db

// MigrationCount is how many migrations the schema history holds.
var MigrationCount = len(migrations())
