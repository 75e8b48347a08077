package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyReleases implements [leadership.ReleaseNotifier]: the first
// subscription starts the store's listener, the last one to end stops it
// (internal/notify.Hub runs it). With [WithoutNotifications] the channel
// never fires.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	if s.noListen {
		return nil, func() {}
	}
	return s.hub.Subscribe(name)
}

// NotifiesOtherProcesses tells flags whether releases by other processes
// reach this store (see [leadership.ReleaseNotifier]). It reports true
// while the listener is connected and has received the notification it sent
// itself through the pool after its LISTEN: a release or eviction by any
// process on this database and schema then reaches it, so followers wait
// for the holder's expiry (the default poll interval is Lease). It reports
// false before that notification arrives (and for good when it never does),
// while the listener reconnects, behind a connection pooler (where the
// listener never runs LISTEN) and with [WithoutNotifications]; flags on the
// default poll interval then poll at most every 2 s.
func (s *Store) NotifiesOtherProcesses() bool { return s.delivered.Load() }

// ProbeTimeout is how long the listener waits for the notification it
// sends itself before it logs (Warn) that notifications do not arrive.
// Until that notification arrives, [Store.NotifiesOtherProcesses]
// reports false whatever the time.
const ProbeTimeout = 5 * time.Second

// errPooled ends the listener: the pool's connections go through a pooler.
var errPooled = errors.New("postgres: a connection pooler is in between")

// listen keeps one LISTEN connection until ctx ends, reconnecting with
// backoff, and wakes the subscribers of each released flag of this schema.
// It is the store's watcher (notify.Hub.Watch): every subscription waits
// on the key "".
func (s *Store) listen(ctx context.Context, _ string) {
	backoff := 100 * time.Millisecond
	for first := true; ; first = false {
		err := s.listenOnce(ctx, !first)
		if errors.Is(err, errPooled) {
			<-ctx.Done() // notifications stay unavailable; the flags poll
		}
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
	var (
		schema string
		pid    uint32
	)
	if err := conn.QueryRow(ctx, `SELECT current_schema(), pg_backend_pid()`).Scan(&schema, &pid); err != nil {
		return err
	}
	if pid != conn.PgConn().PID() {
		// The server session is not the one the connection announced: a
		// pooler (PgBouncer, RDS Proxy) multiplexes sessions. A LISTEN there
		// would stay on a server session that other clients then use, and
		// PgBouncer 1.18 was seen to crash on the notifications it gets for
		// such a session; so the store never listens through one.
		s.logger.LogAttrs(ctx, slog.LevelWarn, "release notifications are off: a connection pooler is in between (the server's backend pid differs from the connection's); flags poll instead; postgres.WithoutNotifications() says so explicitly")
		return errPooled
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
	// The probe goes through the pool, not this connection: behind a
	// pooler in transaction mode a NOTIFY sent on the listening client
	// could run on the very server session that executed the LISTEN and
	// come back to it, while notifications of other sessions never do.
	token, err := s.probe(ctx)
	if err != nil {
		return err
	}
	defer s.delivered.Store(false)
	warn := time.AfterFunc(ProbeTimeout, func() {
		if !s.delivered.Load() {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "release notifications do not arrive (is a connection pooler in between?): flags poll instead; postgres.WithoutNotifications() stops listening",
				slog.Duration("waited", ProbeTimeout))
		}
	})
	defer warn.Stop()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var p struct{ Schema, Name, Probe string }
		if json.Unmarshal([]byte(n.Payload), &p) != nil {
			continue
		}
		if p.Probe != "" {
			if p.Probe == token && !s.delivered.Swap(true) {
				s.logger.LogAttrs(ctx, slog.LevelDebug, "release notifications arrive")
			}
			continue
		}
		if p.Schema == schema {
			s.hub.Notify(p.Name)
		}
	}
}

// probe sends, through the pool, a notification on [Channel] that only
// this listener recognizes, and returns its token.
func (s *Store) probe(ctx context.Context) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	payload, _ := json.Marshal(struct {
		Probe string `json:"probe"`
	}{token})
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, string(payload)); err != nil {
		return "", describe("send the listener's probe notification", err)
	}
	return token, nil
}
