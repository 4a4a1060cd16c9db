package db

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventsChannel is the PostgreSQL NOTIFY channel on which every commit of
// event rows is announced (with an empty payload).
const EventsChannel = "guestlink_events"

// ListenEvents holds one dedicated connection to the PostgreSQL database
// at url, LISTENs on EventsChannel and calls poke after every
// notification, and once after every (re)connection, since notifications
// sent while it was disconnected are lost: the caller then reads the event
// rows after the last id it delivered. It reconnects with backoff (100 ms
// doubling to 5 s) until ctx ends.
func ListenEvents(ctx context.Context, url string, poke func(), log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, url, poke, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		log.Warn("event listener lost its database connection; reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func listenOnce(ctx context.Context, url string, poke, connected func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+EventsChannel); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	connected()
	poke() // catch up on what was committed while not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		poke()
	}
}
