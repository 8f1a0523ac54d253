package auditchain

import "time"

// Timer arms a sink's checkpoint due by time. Its methods are called with
// the sink's lock held (the lock its writes hold); fire runs on the
// timer's goroutine without it, takes it, and calls Take before anything
// else: a callback of a timer that was stopped or replaced may still come,
// and Take tells it so.
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

// Retry arms the timer for d from now: a checkpoint whose write failed is
// tried again.
func (t *Timer) Retry(now time.Time, d time.Duration) { t.arm(now, now.Add(d)) }

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

// Take reports whether gen is the armed timer's callback, and if so
// disarms the timer (it fired).
func (t *Timer) Take(gen uint64) bool {
	if gen != t.gen {
		return false
	}
	t.t = nil
	return true
}
