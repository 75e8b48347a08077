// Command demo shows the leadership flag at work on the embedded SQLite
// default: it starts three worker processes that share one flag in a
// database file, then crashes the leader (SIGKILL) and later stops the next
// leader gracefully (SIGTERM), so you can watch leadership move. Each
// worker prints a line every half second while it leads.
//
//	go run ./examples/demo
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/sqlite"
)

const lease = 3 * time.Second

func main() {
	worker := flag.String("worker", "", "run as the worker with this name (used by the demo itself)")
	db := flag.String("db", "", "SQLite database file (default: a temporary file)")
	t0 := flag.Int64("t0", 0, "start of the demo in Unix nanoseconds, so all workers print one timeline")
	flag.Parse()
	if *t0 != 0 {
		start = time.Unix(0, *t0)
	}
	log.SetFlags(0)
	if *worker != "" {
		if err := runWorker(*worker, *db); err != nil {
			log.Fatalf("%s: %v", *worker, err)
		}
		return
	}
	if err := runDemo(*db); err != nil {
		log.Fatal(err)
	}
}

// runWorker holds the flag "nightly-report" and "runs the job" while
// raised, until SIGTERM or SIGINT.
func runWorker(name, path string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(db)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := leadership.NewFlag().
		Store(store).
		Name("nightly-report").
		Process(name).
		Lease(lease).
		PollInterval(250 * time.Millisecond).
		Logger(logger).
		OnRaise(func(context.Context) { fmt.Printf("%s  %-8s raised the flag\n", stamp(), name) }).
		OnLower(func() { fmt.Printf("%s  %-8s lowered the flag\n", stamp(), name) }).
		Build(ctx)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Printf("%s  %-8s started; the flag is held by %q\n", stamp(), name, f.Holder())
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Printf("%s  %-8s got SIGTERM: lowering and releasing the flag\n", stamp(), name)
			return f.Close()
		case <-tick.C:
			if tok, ok := f.Token(); ok {
				fmt.Printf("%s  %-8s LEADER (token %d): running the job\n", stamp(), name, tok)
			}
		}
	}
}

// runDemo starts three workers and disturbs them.
func runDemo(path string) error {
	if path == "" {
		dir, err := os.MkdirTemp("", "leadership-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "flags.db")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("Three workers share the flag \"nightly-report\" in %s (lease %v).\n\n", path, lease)
	workers := map[string]*exec.Cmd{}
	var mu sync.Mutex
	for _, name := range []string{"worker-1", "worker-2", "worker-3"} {
		cmd := exec.Command(exe, "-worker", name, "-db", path, "-t0", fmt.Sprint(start.UnixNano()))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		workers[name] = cmd
		time.Sleep(200 * time.Millisecond) // the first one started leads
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cmd := range workers {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}()
	leader := func() string {
		db, err := sqlite.Open(path)
		if err != nil {
			return ""
		}
		defer db.Close()
		s, _ := sqlite.New(db)
		rows, _, err := s.Flags(context.Background())
		if err != nil || len(rows) == 0 {
			return ""
		}
		return rows[0].Holder
	}
	disturb := func(sig syscall.Signal, what string) {
		time.Sleep(2 * time.Second)
		name := leader()
		mu.Lock()
		cmd := workers[name]
		delete(workers, name)
		mu.Unlock()
		if cmd == nil {
			return
		}
		fmt.Printf("%s  ---- %s the leader %s ----\n", stamp(), what, name)
		_ = cmd.Process.Signal(sig)
		_ = cmd.Wait()
	}
	disturb(syscall.SIGKILL, "SIGKILL (crash):")
	fmt.Printf("%s  ---- nobody may lead until the crashed leader's lease ends, about %v after its last renewal ----\n", stamp(), lease)
	time.Sleep(lease)
	disturb(syscall.SIGTERM, "SIGTERM (graceful stop):")
	time.Sleep(2 * time.Second)
	fmt.Println(strings.Repeat("-", 60))
	fmt.Println("Done: one leader at a time; a crash was covered after about one lease, a graceful stop at once.")
	return nil
}

var start = time.Now()

func stamp() string { return fmt.Sprintf("%6.2fs", time.Since(start).Seconds()) }
