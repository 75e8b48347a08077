package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// event is one line a worker printed, or its exit.
type event struct {
	w      *worker
	kind   string // READY, R, L, S, C, M0, M1, RESULT, EXIT
	t      time.Time
	fields []string
}

// worker is one child process running "bench worker" or "bench
// scale-worker".
type worker struct {
	id     int
	cmd    *exec.Cmd
	ready  bool
	raised bool
	gone   bool // killed or exited
	stats  []event
}

// group is a set of workers and the merged stream of their lines.
type group struct {
	events  chan event
	workers []*worker
	sub     string
	args    func(id int) []string
	log     []event // every R, L, C, EXIT, in arrival order
	closes  []event // every K (a worker's Close times), in arrival order
}

func newGroup(sub string, args func(id int) []string) *group {
	return &group{events: make(chan event, 1024), sub: sub, args: args}
}

func (g *group) spawn() (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := &worker{id: len(g.workers) + 1}
	cmd := exec.Command(exe, append([]string{g.sub}, g.args(w.id)...)...)
	cmd.Stderr = &prefixWriter{prefix: fmt.Sprintf("[%s %d] ", g.sub, w.id), w: os.Stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.cmd = cmd
	g.workers = append(g.workers, w)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			ev := event{w: w, kind: f[0], t: time.Now(), fields: f[1:]}
			if len(f) > 1 && (f[0] == "R" || f[0] == "L" || f[0] == "C" || f[0] == "S" || f[0] == "M0" || f[0] == "M1") {
				if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					ev.t = time.Unix(0, ns)
				}
			}
			g.events <- ev
		}
		_ = cmd.Wait()
		g.events <- event{w: w, kind: "EXIT", t: time.Now()}
	}()
	return w, nil
}

// pump handles events until stop returns true for one (true is returned)
// or the timeout passes (false).
func (g *group) pump(timeout time.Duration, stop func(event) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case ev := <-g.events:
			switch ev.kind {
			case "READY":
				ev.w.ready = true
			case "R":
				ev.w.raised = true
				g.log = append(g.log, ev)
			case "L", "C":
				ev.w.raised = false
				g.log = append(g.log, ev)
			case "EXIT":
				ev.w.gone, ev.w.raised = true, false
				g.log = append(g.log, ev)
			case "S":
				ev.w.stats = append(ev.w.stats, ev)
			case "K":
				g.closes = append(g.closes, ev)
			}
			if stop != nil && stop(ev) {
				return true
			}
		case <-deadline.C:
			return false
		}
	}
}

func (g *group) alive() []*worker {
	var a []*worker
	for _, w := range g.workers {
		if !w.gone {
			a = append(a, w)
		}
	}
	return a
}

func (g *group) holder() *worker {
	for _, w := range g.alive() {
		if w.raised {
			return w
		}
	}
	return nil
}

// ensure spawns workers until n are alive and waits until all are ready.
func (g *group) ensure(n int, timeout time.Duration) error {
	for len(g.alive()) < n {
		if _, err := g.spawn(); err != nil {
			return err
		}
	}
	allReady := func() bool {
		for _, w := range g.alive() {
			if !w.ready {
				return false
			}
		}
		return true
	}
	if allReady() {
		return nil
	}
	var died *worker
	if !g.pump(timeout, func(ev event) bool {
		if ev.kind == "EXIT" && !ev.w.ready {
			died = ev.w
			return true
		}
		return allReady()
	}) {
		return fmt.Errorf("%s: workers not ready after %v", g.sub, timeout)
	}
	if died != nil {
		return fmt.Errorf("%s %d exited before it was ready (its error is on stderr)", g.sub, died.id)
	}
	return nil
}

// waitHolder waits until some live worker is raised.
func (g *group) waitHolder(timeout time.Duration) (*worker, error) {
	if h := g.holder(); h != nil {
		return h, nil
	}
	var h *worker
	g.pump(timeout, func(ev event) bool {
		if ev.kind == "R" && !ev.w.gone {
			h = ev.w
			return true
		}
		return false
	})
	if h == nil {
		return nil, fmt.Errorf("%s: no process raised the flag within %v", g.sub, timeout)
	}
	return h, nil
}

func (g *group) signal(w *worker, sig syscall.Signal) {
	_ = w.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		w.raised = false
	}
}

// stopAll terminates every live worker and waits for their exits.
func (g *group) stopAll() {
	for _, w := range g.alive() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	g.pump(15*time.Second, func(event) bool { return len(g.alive()) == 0 })
	for _, w := range g.alive() {
		_ = w.cmd.Process.Kill()
	}
	g.pump(5*time.Second, func(event) bool { return len(g.alive()) == 0 })
}

// takeover signals the holder and returns the time until another process
// raised.
func (g *group) takeover(h *worker, sig syscall.Signal, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	g.signal(h, sig)
	var t1 time.Time
	ok := g.pump(timeout, func(ev event) bool {
		if ev.kind == "R" && ev.w != h {
			t1 = ev.t
			return true
		}
		return false
	})
	if !ok {
		return 0, fmt.Errorf("%s: nobody raised within %v of signal %v", g.sub, timeout, sig)
	}
	// Wait for the signalled process to be gone before the next round.
	if !h.gone {
		g.pump(10*time.Second, func(event) bool { return h.gone })
	}
	return t1.Sub(t0), nil
}

// holderAfter spawns workers until k are alive and ready, waits for a
// holder, lets a random 0.2 to 1.2 × phase pass so that what the caller
// does next falls anywhere in the holder's renewal cycle, and returns the
// holder then.
func (g *group) holderAfter(k int, phase, timeout time.Duration, rnd func() float64) (*worker, error) {
	if err := g.ensure(k, 60*time.Second); err != nil {
		return nil, err
	}
	if _, err := g.waitHolder(timeout); err != nil {
		return nil, err
	}
	g.pump(time.Duration(float64(phase)*(0.2+rnd())), nil)
	return g.waitHolder(timeout)
}

// rounds runs n takeovers with k processes: wait for a holder, wait a
// random part of phase so that the signal falls anywhere in the renewal
// cycle, signal it, measure, replace it.
func (g *group) rounds(n, k int, sig syscall.Signal, phase, timeout time.Duration, rnd func() float64) ([]time.Duration, error) {
	var ds []time.Duration
	for range n {
		h, err := g.holderAfter(k, phase, timeout, rnd)
		if err != nil {
			return ds, err
		}
		d, err := g.takeover(h, sig, timeout)
		if err != nil {
			return ds, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprint(p.w, p.prefix+line)
		}
	}
	return len(b), nil
}

// procCPU returns user+system CPU seconds of a process from /proc.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clkTck, true
}

const clkTck = 100 // USER_HZ on Linux

// postgresPIDs lists every process named postgres (all backends and
// server processes of every cluster on the machine).
func postgresPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == "postgres" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func sumCPU(pids []int) float64 {
	var s float64
	for _, p := range pids {
		c, _ := procCPU(p)
		s += c
	}
	return s
}
