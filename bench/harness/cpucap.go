package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuCap holds processes to a fixed share of one CPU with the kernel's
// CFS bandwidth control (a cgroup's CPU quota), so that the scaling group
// can measure replicas as the bottleneck on a machine whose cores they
// share with PostgreSQL and the load generator: each capped replica gets
// the same share, whatever else runs (docs/scaling.md). It needs the
// cgroup v1 "cpu" controller or cgroup v2's cpu.max, writable (root); a
// machine without them reports the capped figures as not run.
type cpuCap struct {
	dir  string
	root string // the hierarchy's root, where close moves what is left
	v2   bool
}

// capPeriod is the quota's period: short, so a capped process is held
// back for at most a few milliseconds at a time rather than a tenth of a
// second (the kernel's default period).
const capPeriod = 10000 // µs

// newCPUCap makes a cgroup named name whose processes get share of one
// CPU (0 < share ≤ number of CPUs).
func newCPUCap(name string, share float64) (*cpuCap, error) {
	quota := int(share * capPeriod)
	if quota < 1000 {
		return nil, fmt.Errorf("cpu cap %.3f: below the kernel's 1 ms minimum quota", share)
	}
	// cgroup v1: the cpu controller's own hierarchy.
	for _, root := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		c := &cpuCap{dir: filepath.Join(root, name), root: root}
		if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if err := write(filepath.Join(c.dir, "cpu.cfs_period_us"), strconv.Itoa(capPeriod)); err != nil {
			c.close()
			return nil, err
		}
		if err := write(filepath.Join(c.dir, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
			c.close()
			return nil, err
		}
		return c, nil
	}
	// cgroup v2: the unified hierarchy, when the cpu controller is
	// enabled for the root's children.
	root := "/sys/fs/cgroup"
	ctl, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " cpu ") {
		// Enabling it would change the machine's setup for everything
		// else on it: the bench does not.
		return nil, errors.New("no cgroup CPU controller to cap replicas with (cgroup v1 cpu, or v2 with cpu enabled at the root)")
	}
	c := &cpuCap{dir: filepath.Join(root, name), root: root, v2: true}
	if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if err := write(filepath.Join(c.dir, "cpu.max"), fmt.Sprintf("%d %d", quota, capPeriod)); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func write(path, s string) error {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// add moves pid (all its threads) into the cgroup.
func (c *cpuCap) add(pid int) error {
	return write(filepath.Join(c.dir, "cgroup.procs"), strconv.Itoa(pid))
}

// throttled returns the quota periods the cgroup ran in and how many of
// them ended with its processes held back (cpu.stat): a capped replica that
// was the bottleneck is held back in most periods.
func (c *cpuCap) throttled() (periods, throttled int64) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		}
	}
	return periods, throttled
}

// close moves what is still in the cgroup back to the root and removes it.
func (c *cpuCap) close() {
	if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(b)) {
			_ = write(filepath.Join(c.root, "cgroup.procs"), pid)
		}
	}
	_ = os.Remove(c.dir)
}
