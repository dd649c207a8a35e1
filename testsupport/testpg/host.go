package testpg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverBinaries are the ones Start cannot work without.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// debianBinGlob is where Debian installs each major version's binaries; it is
// the fallback for machines without pg_config on PATH.
var debianBinGlob = "/usr/lib/postgresql/*/bin"

// resolveBinDir finds the server binaries: an explicit directory (option, then
// TESTPG_BINDIR) is used as is, without falling back, so that pointing it at
// the wrong place is an error rather than a silent switch to another version.
func resolveBinDir(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv(EnvBinDir)
	}
	if explicit != "" {
		if err := checkBinDir(explicit); err != nil {
			return "", fmt.Errorf("%w: %v; %s", ErrUnavailable, err, installHint)
		}
		return explicit, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return versionLess(dirs[j], dirs[i]) })
	for _, dir := range dirs {
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no initdb/pg_ctl/postgres via pg_config --bindir or in %s; %s",
		ErrUnavailable, debianBinGlob, installHint)
}

func checkBinDir(dir string) error {
	for _, name := range serverBinaries {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s not found", p)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", p)
		}
	}
	return nil
}

// versionLess orders /usr/lib/postgresql/<version>/bin paths numerically, so
// that 10 sorts after 9.6.
func versionLess(a, b string) bool {
	va := strings.Split(filepath.Base(filepath.Dir(a)), ".")
	vb := strings.Split(filepath.Base(filepath.Dir(b)), ".")
	for i := 0; i < len(va) && i < len(vb); i++ {
		na, _ := strconv.Atoi(va[i])
		nb, _ := strconv.Atoi(vb[i])
		if na != nb {
			return na < nb
		}
	}
	return len(va) < len(vb)
}

// serverUser decides who runs the server binaries. PostgreSQL refuses to run
// as root, so root hands them to the postgres OS user; anyone else runs them
// directly. uid/gid are -1 when no switch is needed.
func serverUser() (name string, uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return "", -1, -1, nil
	}
	u, err := user.Lookup(superuser)
	if err != nil {
		return "", 0, 0, fmt.Errorf("%w: running as root needs the OS user %q to run the server (%v); %s",
			ErrUnavailable, superuser, err, installHint)
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return "", 0, 0, fmt.Errorf("%w: running as root needs runuser (util-linux) to drop to %q: %v",
			ErrUnavailable, superuser, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return superuser, uid, gid, nil
}

// maxSocketDir keeps "<dir>/testpg-NNNNNNNNNN/.s.PGSQL.NNNNN" within the
// 107-byte limit of a unix socket path; postgres would refuse to start.
const maxSocketDir = 107 - len("/testpg-0123456789/.s.PGSQL.65535")

// tempBase picks the parent of the cluster directory: $TMPDIR normally, but
// /tmp when $TMPDIR is too long for the socket path or, as root, when the
// postgres user could not reach it (e.g. TMPDIR under /root).
func tempBase(uid, gid int) string {
	base := os.TempDir()
	if len(base) > maxSocketDir || (uid >= 0 && !traversable(base, uid, gid)) {
		return "/tmp"
	}
	return base
}

// traversable approximates whether uid/gid may search every directory on the
// path; supplementary groups and ACLs are ignored, which errs towards /tmp.
func traversable(dir string, uid, gid int) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			return false
		}
		mode := st.Mode
		switch {
		case int(st.Uid) == uid:
			if mode&0o100 == 0 {
				return false
			}
		case int(st.Gid) == gid:
			if mode&0o010 == 0 {
				return false
			}
		default:
			if mode&0o001 == 0 {
				return false
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

const (
	dirPrefix = "testpg-"
	lockName  = ".lock"
)

// makeClusterDir creates the cluster's private directory and takes its lock.
// The lock is held for the life of this process (the kernel drops it when the
// process dies, however it dies), which is how reapStale tells an abandoned
// cluster from one that another test binary is still using.
func makeClusterDir(base string, uid, gid int) (dir string, lockFD int, err error) {
	dir, err = os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return "", -1, fmt.Errorf("testpg: %w", err)
	}
	fail := func(err error) (string, int, error) {
		os.RemoveAll(dir)
		return "", -1, fmt.Errorf("testpg: preparing %s: %w", dir, err)
	}
	// Lock a temporary name and only then rename it into place, so that a
	// reaper never sees an unlocked .lock of a live cluster.
	tmp := filepath.Join(dir, lockName+".tmp")
	fd, err := syscall.Open(tmp, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fail(err)
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		syscall.Close(fd)
		return fail(err)
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			syscall.Close(fd)
			return fail(err)
		}
	}
	// MkdirTemp already uses 0700; be explicit because postgres insists on it
	// for the socket directory's privacy and initdb for the data directory.
	if err := os.Chmod(dir, 0o700); err != nil {
		syscall.Close(fd)
		return fail(err)
	}
	return dir, fd, nil
}

func unlock(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}

// reapStale stops and removes clusters whose owning test process is gone.
// Best effort: anything unexpected is left alone, since a fresh directory and
// port mean leftovers cannot break this run, only waste memory.
func reapStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		reapDir(dir)
	}
}

func reapDir(dir string) {
	fd, err := syscall.Open(filepath.Join(dir, lockName), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		// A process that died between MkdirTemp and taking its lock leaves
		// a directory that never held a server; it is safe to remove once
		// it is clearly not one being set up right now.
		if errors.Is(err, syscall.ENOENT) && abandonedEmpty(dir) {
			os.RemoveAll(dir)
		}
		return
	}
	defer syscall.Close(fd)
	if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // its owner is alive
	}
	if killPostmaster(filepath.Join(dir, "data")) != nil {
		return
	}
	removeAll(dir)
}

func abandonedEmpty(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil || time.Since(fi.ModTime()) < time.Hour {
		return false
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != lockName+".tmp" {
			return false
		}
	}
	return true
}

// killPostmaster shuts down the postmaster of dataDir, if one is running, with
// SIGQUIT (what pg_ctl's immediate mode sends), escalating to SIGKILL.
// The pid from postmaster.pid is only trusted while that process's working
// directory is dataDir: after a reboot the pid may belong to anything.
func killPostmaster(dataDir string) error {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil // no server was ever started there, or it exited cleanly
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return nil
	}
	if !runsIn(pid, dataDir) {
		return nil
	}
	syscall.Kill(pid, syscall.SIGQUIT)
	// Immediate shutdown waits up to 5s for its children before it exits.
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !runsIn(pid, dataDir) {
			return nil
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !runsIn(pid, dataDir) {
			return nil
		}
	}
	return fmt.Errorf("postmaster %d of %s does not exit", pid, dataDir)
}

// runsIn reports whether pid is a live process whose cwd is dir. A zombie has
// no cwd, so a postmaster that exited but was not yet reaped counts as gone.
func runsIn(pid int, dir string) bool {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		want = dir
	}
	return cwd == want
}

// removeAll retries because backends that are still exiting after an
// immediate shutdown may briefly keep creating or removing files.
func removeAll(dir string) error {
	var err error
	for i := 0; i < 10; i++ {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("removing %s: %w", dir, err)
}
