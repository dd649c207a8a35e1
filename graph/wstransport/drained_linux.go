package wstransport

import "golang.org/x/sys/unix"

// drained reports whether the connection's socket has no byte waiting to
// be sent or acknowledged (SIOCOUTQ), so that a message written now goes
// into an empty send buffer and the write returns without waiting for the
// client. A client that reads what it is sent is drained between changes;
// one that does not, or a socket this cannot be asked of, says no and its
// writes stay on the worker pool.
func (c *Conn) drained() bool {
	if c.raw == nil {
		return false
	}
	unsent := -1
	if err := c.raw.Control(func(fd uintptr) {
		if n, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			unsent = n
		}
	}); err != nil {
		return false
	}
	return unsent == 0
}
