package auditchain

import "time"

// Timer arms a sink's checkpoint due by time. Its methods are called with
// the sink's lock held (the lock its writes hold); fire runs on the
// timer's goroutine without it, takes it, and calls Fire before anything
// else: a callback of a timer that was stopped or replaced may still come,
// and Fire tells it so.
type Timer struct {
	fire func(gen uint64)
	t    *time.Timer
	at   time.Time
	gen  uint64
}

// NewTimer returns a disarmed timer whose callback is fire.
func NewTimer(fire func(gen uint64)) *Timer { return &Timer{fire: fire} }

// Arm arms the timer for when w's next checkpoint is due by time (none
// when no record waits for one), unless it is armed for earlier.
func (t *Timer) Arm(w *Writer) {
	at := w.NextDue()
	if at.IsZero() || t.t != nil && !at.Before(t.at) {
		return
	}
	t.arm(time.Now(), at)
}

// retryAfter is how long a checkpoint whose write failed waits before it
// is tried again; the records stay uncovered meanwhile.
const retryAfter = time.Second

// Retry arms the timer for a second from now: a checkpoint whose write
// failed is tried again.
func (t *Timer) Retry(now time.Time) { t.arm(now, now.Add(retryAfter)) }

func (t *Timer) arm(now, at time.Time) {
	t.Stop()
	gen := t.gen
	t.t, t.at = time.AfterFunc(max(at.Sub(now), 0), func() { t.fire(gen) }), at
}

// Stop disarms the timer.
func (t *Timer) Stop() {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
	t.gen++
}

// Fire reports whether the callback of generation gen is to write w's
// checkpoint now: gen is the armed timer's (it is then disarmed), and a
// checkpoint is due at now. When gen is the armed timer's but none is due
// (the records it was armed for are covered already), it arms the timer
// again for the next one.
func (t *Timer) Fire(gen uint64, w *Writer, now time.Time) bool {
	if gen != t.gen {
		return false // a callback of a timer stopped or replaced
	}
	t.t = nil
	if due, _ := w.Due(now); !due {
		t.Arm(w)
		return false
	}
	return true
}
