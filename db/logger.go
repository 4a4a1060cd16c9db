package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// slowStatement is the duration above which a statement is logged as slow.
const slowStatement = 500 * time.Millisecond

// gormLogger sends gorm's messages to a slog.Logger: failed statements
// (except "record not found", which the Store turns into ErrNotFound) at
// debug level, since the Store's caller sees and reports the error itself,
// and slow statements at warn level.
type gormLogger struct {
	log *slog.Logger
}

var (
	_ logger.Interface  = gormLogger{}
	_ gorm.ParamsFilter = gormLogger{}
)

func newGormLogger(l *slog.Logger) logger.Interface {
	if l == nil {
		return logger.Discard
	}
	return gormLogger{log: l.With("component", "db")}
}

// LogMode returns the logger unchanged: levels are slog's business.
func (g gormLogger) LogMode(logger.LogLevel) logger.Interface { return g }

// Info logs a gorm informational message.
func (g gormLogger) Info(ctx context.Context, msg string, args ...any) {
	g.log.InfoContext(ctx, fmt.Sprintf(msg, args...))
}

// Warn logs a gorm warning.
func (g gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	g.log.WarnContext(ctx, fmt.Sprintf(msg, args...))
}

// Error logs a gorm error.
func (g gormLogger) Error(ctx context.Context, msg string, args ...any) {
	g.log.ErrorContext(ctx, fmt.Sprintf(msg, args...))
}

// ParamsFilter drops statement parameters from logged SQL: instance configs
// may hold secrets (cloud-init user data).
func (g gormLogger) ParamsFilter(_ context.Context, sql string, _ ...any) (string, []any) {
	return sql, nil
}

// Trace logs a statement that failed or was slow.
func (g gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	elapsed := time.Since(begin)
	switch {
	case err != nil && !errors.Is(err, gorm.ErrRecordNotFound):
		sql, _ := fc()
		g.log.DebugContext(ctx, "statement failed", "sql", sql, "elapsed", elapsed, "err", err)
	case elapsed > slowStatement:
		sql, rows := fc()
		g.log.WarnContext(ctx, "slow statement", "sql", sql, "rows", rows, "elapsed", elapsed)
	}
}
