//go:build !linux

package wstransport

// drained says no where the socket's send queue cannot be read: every
// write goes through the worker pool.
func (c *Conn) drained() bool { return false }
