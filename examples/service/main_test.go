package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTwoInstancesOneLeader runs the service twice, as a user would, on one
// SQLite file and checks that exactly one answers /leader with 200, that
// both are alive and that stopping the leader hands the job over.
func TestTwoInstancesOneLeader(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	db := "sqlite:" + filepath.Join(dir, "service.db")
	var addrs []string
	var cmds []*exec.Cmd
	for range 2 {
		addr := freeAddr(t)
		cmd := exec.Command(bin, "-addr", addr, "-dsn", db, "-lease", "2s")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		addrs, cmds = append(addrs, addr), append(cmds, cmd)
		waitUp(t, addr)
	}
	leaders := 0
	leader := -1
	for i, a := range addrs {
		if code, _ := get(t, a, "/healthz"); code != 200 {
			t.Fatalf("instance %d /healthz = %d", i, code)
		}
		if code, _ := get(t, a, "/leader"); code == 200 {
			leaders++
			leader = i
		}
	}
	if leaders != 1 {
		t.Fatalf("%d instances answer /leader with 200, want 1", leaders)
	}
	if _, body := get(t, addrs[leader], "/metrics"); !strings.Contains(body, `leadership_flag_state{name="example-service-job"`) {
		t.Fatalf("/metrics lacks leadership_flag_state:\n%s", body)
	}
	_ = cmds[leader].Process.Signal(syscall.SIGTERM)
	_, _ = cmds[leader].Process.Wait()
	other := addrs[1-leader]
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := get(t, other, "/leader"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other instance did not take over after a graceful stop")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitUp(t *testing.T, addr string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("service at %s did not start", addr)
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
