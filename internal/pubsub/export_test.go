package pubsub

// Kill stops n the way a crash would: what is queued is lost and no
// goodbye is sent, so listeners must find out by its silence.
func (n *Notifier) Kill() {
	n.mu.Lock()
	n.queue = nil
	clear(n.signals)
	n.mu.Unlock()
	close(n.stop)
	<-n.done
	_ = n.db.Close()
}
