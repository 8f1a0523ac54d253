package redisnode

// Queued is how many scripts wait in b's queues, not yet taken by a
// flusher.
func Queued(b *Batch) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.one.queue)
	for _, l := range b.nodes {
		n += len(l.queue)
	}
	return n
}
