package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyReleases implements [leadership.ReleaseNotifier]: the first
// subscription starts the store's listener, the last one to end stops it.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	ch, unsubscribe := s.hub.Subscribe(name)
	s.mu.Lock()
	s.subs++
	if s.subs == 1 {
		// The previous listener, if any, has exited: the end of the last
		// subscription waited for it under s.mu.
		ctx, stop := context.WithCancel(context.Background())
		s.stop, s.exited = stop, make(chan struct{})
		go s.listen(ctx, s.exited)
	}
	s.mu.Unlock()
	var done bool
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if done {
			return
		}
		done = true
		unsubscribe()
		s.subs--
		if s.subs == 0 {
			s.stop()
			<-s.exited
		}
	}
}

// NotifiesOtherProcesses reports true (see [leadership.ReleaseNotifier]): a
// release or eviction by any process on this database and schema sends a
// NOTIFY that this store's listener receives, so followers keep the
// default poll interval at Lease/3.
func (s *Store) NotifiesOtherProcesses() bool { return true }

// listen keeps one LISTEN connection until ctx ends, reconnecting with
// backoff, and wakes the subscribers of each released flag of this schema.
func (s *Store) listen(ctx context.Context, exited chan<- struct{}) {
	defer close(exited)
	backoff := 100 * time.Millisecond
	for first := true; ; first = false {
		err := s.listenOnce(ctx, !first)
		if ctx.Err() != nil {
			return
		}
		s.logger.LogAttrs(ctx, slog.LevelWarn, "release listener lost its connection; flags keep polling",
			slog.Any("error", err), slog.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce takes a connection out of the pool, listens on it until it
// fails or ctx ends, and closes it (a LISTENing connection must not go back
// to the pool). After a reconnect it wakes every subscriber once, in case a
// release was missed meanwhile.
func (s *Store) listenOnce(ctx context.Context, reconnected bool) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return err
	}
	if conn.PgConn().TxStatus() != 'I' {
		return fmt.Errorf("LISTEN takes effect only at commit: %w", errInTransaction)
	}
	if reconnected {
		s.logger.LogAttrs(ctx, slog.LevelInfo, "release listener reconnected")
		for _, name := range s.hub.Names() {
			s.hub.Notify(name)
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var p struct{ Schema, Name string }
		if json.Unmarshal([]byte(n.Payload), &p) != nil || p.Schema != schema {
			continue
		}
		s.hub.Notify(p.Name)
	}
}
