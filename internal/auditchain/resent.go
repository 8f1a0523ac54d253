package auditchain

import "github.com/agentsafe/agentsafe/middleware"

// Resent remembers the records a write that failed stored nonetheless (its
// reply was lost, or it stopped after some of its lines), so that a sink
// does not store them twice: the engine sends a failed batch's queued
// records again, in order, and its synchronous ones not at all.
type Resent struct{ stored []middleware.Event }

// Remember notes that events were stored by a write that failed.
func (r *Resent) Remember(events []middleware.Event) {
	r.stored = append(r.stored[:0:0], events...)
}

// Drop returns events without those remembered, which the engine sent
// again at their front; it forgets them.
func (r *Resent) Drop(events []middleware.Event) []middleware.Event {
	if len(r.stored) == 0 {
		return events
	}
	stored := r.stored
	r.stored = nil
	j := 0
	for i, e := range events {
		k := j
		for k < len(stored) && stored[k] != e {
			k++
		}
		if k == len(stored) {
			return events[i:]
		}
		j = k + 1
	}
	return nil
}
