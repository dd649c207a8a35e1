// Package proc starts a binary the way the end-to-end tests and the bench
// both do: on a free loopback address, with environment variables added to
// the caller's, its output kept, ready once an HTTP path answers 200, and
// stopped gracefully (SIGTERM, then SIGKILL after 30 s). testserver (the
// tests' voucherd) and bench/harness (the bench's service and floor) are
// built on it.
package proc

import (
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

// FreeAddr returns a free loopback address.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Options say what to start.
type Options struct {
	// Name names the process in errors.
	Name string
	Bin  string
	Args []string
	// Env is added to the caller's environment (a later value wins).
	Env map[string]string
	// Addr is the address it listens on; ReadyPath the path that answers
	// 200 once it is ready, within ReadyWithin.
	Addr        string
	ReadyPath   string
	ReadyWithin time.Duration
	// Tail keeps only the last Tail bytes of the output (0: all of it).
	Tail int
}

// Process is a started binary.
type Process struct {
	Name string
	URL  string
	Addr string
	cmd  *exec.Cmd
	out  *buffer
	done chan struct{}
}

// Start runs o.Bin and waits until it is ready. On failure the process is
// stopped and the error carries what it printed.
func Start(o Options) (*Process, error) {
	cmd := exec.Command(o.Bin, o.Args...)
	cmd.Env = os.Environ()
	for k, v := range o.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &buffer{tail: o.Tail}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	p := &Process{Name: o.Name, URL: "http://" + o.Addr, Addr: o.Addr, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err := apiclient.WaitReady(p.URL, o.ReadyPath, p.done, o.ReadyWithin); err != nil {
		if !errors.Is(err, apiclient.ErrExited) {
			p.Stop()
		}
		return nil, fmt.Errorf("%s %v:\n%s", o.Name, err, out.String())
	}
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is what the process printed (its tail when Options.Tail is set).
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

// Exited reports whether the process has ended, and its exit code.
func (p *Process) Exited() (bool, int) {
	select {
	case <-p.done:
		return true, p.cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}

// Stop asks for a graceful exit (SIGTERM) and kills the process if it has
// not exited within 30 seconds; it reports whether the exit was graceful
// (true too when it had already ended).
func (p *Process) Stop() bool {
	if !p.Alive() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// Kill ends the process at once (SIGKILL), as a crash would.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// buffer keeps what is written to it: all of it, or its last tail bytes.
type buffer struct {
	mu   sync.Mutex
	b    []byte
	tail int
}

func (t *buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if t.tail > 0 && len(t.b) > t.tail {
		t.b = append([]byte(nil), t.b[len(t.b)-t.tail:]...)
	}
	return len(p), nil
}

func (t *buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
