package natsbus

// Kill drops the connection without a goodbye and stops the heartbeats, as
// a replica killed mid-flight would.
func (b *Bus) Kill() {
	b.closed.Store(true)
	b.cancel()
	b.nc.Close()
	b.wg.Wait()
}
