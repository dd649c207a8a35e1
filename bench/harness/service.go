package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/voucherd/voucherd/testsupport/apiclient"
)

// Process is a child the bench started (the service or the floor), with
// its output kept (the tail) for error messages.
type Process struct {
	Name string
	URL  string
	Addr string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 64<<10 {
		t.b = append([]byte(nil), t.b[len(t.b)-64<<10:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// FreeAddr returns a free loopback address.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartProcess runs bin with args and env added to the bench's own
// environment, and waits until GET readyPath answers 200.
func StartProcess(name, bin string, args []string, env map[string]string, addr, readyPath string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, URL: "http://" + addr, Addr: addr, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err := apiclient.WaitReady(p.URL, readyPath, p.done, 60*time.Second); err != nil {
		if !errors.Is(err, apiclient.ErrExited) {
			p.Stop()
		}
		return nil, fmt.Errorf("%s %v:\n%s", name, err, out.String())
	}
	return p, nil
}

// Pid is the process id (for /proc sampling).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is the tail of what the process printed.
func (p *Process) Output() string { return p.out.String() }

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop asks for a graceful exit (SIGTERM) and kills the process if it has
// not exited within 30 seconds.
func (p *Process) Stop() {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// OpenFiles counts pid's open file descriptors.
func OpenFiles(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
