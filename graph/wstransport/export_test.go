package wstransport

// Drained is drained, for the tests of who writes a change.
func (c *Conn) Drained() bool { return c.drained() }
