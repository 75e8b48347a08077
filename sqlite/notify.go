package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"time"

	"github.com/dbflag/leadership/internal/sqlstore"
)

// The watcher carries releases across processes. One runs per [Store]
// while any flag of the store waits for releases (the first subscription
// starts it, the last one to end stops it: internal/notify.Hub runs it).
// It holds one connection of
// the store's pool and no other resource of the database:
//
//   - A file-change signal of the operating system (inotify on Linux, on
//     the directory of the database file, for the file and its -wal
//     file) wakes it when any process writes the database. It costs no
//     statement while nothing is written.
//   - On a signal it reads PRAGMA data_version on its connection, which
//     changes only when another connection has committed (no table is
//     read). SQLite writes a commit's frames to the -wal file before the
//     commit becomes visible (after the fsync), so the signal usually
//     arrives early: the watcher reads data_version again 1, 2, 4, …,
//     256 ms after the last signal (ten reads at most per signal; a
//     change seen does not stop them, since the kernel merges the
//     signals of two writes that follow each other closely, and the
//     second commit may become visible after the first). A store that
//     has released a flag sets the file's times once the release has
//     committed (announceRelease), a second signal that comes when the
//     commit is visible, however long the fsync took.
//   - When data_version has changed, one SELECT lists the free rows
//     (holder ''), and the flags of this store that wait on a row that
//     has become free since the last look (a new (name, version) pair)
//     are woken, as a release in this process wakes them.
//
// The signal is a hint: a writer of an older version that stalls for
// longer than the last recheck between writing its commit and making it
// visible, a store that cannot set the file's times, a file
// system without change notifications, or a system other than Linux
// leave the flags to their poll, so the store does not report that its
// notifications reach other processes (NotifiesOtherProcesses), and the
// default poll interval stays capped at 2 s.

// recheckLimit is the last re-read of data_version after a file-change
// signal.
const recheckLimit = 256 * time.Millisecond

// NotifyReleases implements [leadership.ReleaseNotifier]: releases by
// flags of this store wake its flags at once; releases by other processes
// sharing the file wake them through the store's watcher (see the package
// documentation), a hint on which the flags do not rely.
func (s *Store) NotifyReleases(name string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(name)
}

// HintsOtherProcesses reports whether releases by other processes wake
// this store's flags now: its watcher runs and file-change signals reach
// it. It is a hint, not the claim of NotifiesOtherProcesses: flags keep
// the 2 s cap on their default poll interval. The conformance suite
// (storetest.Hinter) checks with it that a graceful handover between
// processes comes well before the poll.
func (s *Store) HintsOtherProcesses() bool { return s.watching.Load() }

// watch runs the watcher until ctx ends. It does nothing (the flags poll)
// for an in-memory database, a pool limited to one connection (the
// watcher's would starve the flags), or where file-change signals are not
// available. It is the store's watcher (notify.Hub.Watch): every
// subscription waits on the key "".
func (s *Store) watch(ctx context.Context, _ string) {
	if s.db.Stats().MaxOpenConnections == 1 {
		return
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	path := s.filePath(ctx, conn)
	if path == "" {
		return // in memory, or a temporary database: no file to watch
	}
	signals, stop, err := fileChanges(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return
	}
	defer stop()
	w := watcher{s: s, conn: conn}
	if !w.check(ctx) {
		return
	}
	s.watching.Store(true)
	defer s.watching.Store(false)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var delay time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-signals:
			if !ok {
				return
			}
			delay = time.Millisecond
		case <-timer.C:
			delay *= 2
		}
		if !w.check(ctx) {
			return
		}
		if delay <= recheckLimit {
			timer.Reset(delay)
		}
	}
}

// filePath returns the path of the database's main file, "" for an
// in-memory or temporary database (or when it cannot be read on conn);
// it reads it once.
func (s *Store) filePath(ctx context.Context, conn *sql.Conn) string {
	if p := s.file.Load(); p != nil {
		return *p
	}
	var path string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
		return ""
	}
	s.file.Store(&path)
	return path
}

// watcher is the state of one watch.
type watcher struct {
	s       *Store
	conn    *sql.Conn
	looked  bool             // whether a look has been made
	version int64            // data_version at the last look
	free    map[string]int64 // free rows at the last look: name → version
}

// check wakes the flags waiting on rows freed since the last look, if
// another connection has committed since. It reports false when the
// connection failed (the watcher then stops; the flags poll).
func (w *watcher) check(ctx context.Context) bool {
	var v int64
	if err := w.conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return false
	}
	if w.looked && v == w.version {
		return true
	}
	first := !w.looked
	w.looked, w.version = true, v
	free, err := sqlstore.FreeRows(ctx, w.conn)
	if err != nil {
		return false
	}
	if !first {
		sqlstore.WakeFreed(&w.s.hub, w.free, free)
	}
	w.free = free
	return true
}
