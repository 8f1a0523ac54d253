package middleware

import (
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

// Attempt workers. Every attempt runs on a goroutine of its own, so that a
// handler that ignores its context cannot hold the caller past its
// deadline. Starting a goroutine per attempt costs its creation, and on a
// machine with an idle processor the wake-up of another thread; an
// engine's parked workers take attempts through a channel instead, on the
// serving goroutine's processor, so a quick handler finishes before the
// serving goroutine yields back (see execution.await).
//
// A worker runs one attempt at a time. It goes back to the pool when the
// engine has taken its attempt's result (its slot is then empty, so a
// later attempt's result can never be mistaken for an earlier one's), or,
// for an attempt the engine abandoned, when the handler finally returns. Workers belong to one Engine, start on demand, and exit
// after about a second parked, so an engine needs no Close.
//
// Inside a testing/synctest bubble attempts get a goroutine each, as a
// worker started outside the bubble must never run a bubbled handler (its
// timers would be real) and a bubble's goroutine must never serve another.
const (
	// workerTick is how often the pool retires the workers that have been
	// parked for at least workerIdleTicks ticks: between one second and a
	// second and a half.
	workerTick      = 500 * time.Millisecond
	workerIdleTicks = 2
	// workersPerProc bounds the parked workers per processor: a burst's
	// extra workers exit when they return instead of parking.
	workersPerProc = 16
	minIdleWorkers = 32
)

type attemptWorkers struct {
	mu      sync.Mutex
	idle    []*attemptWorker // parked; the most recently parked last
	max     int
	period  time.Duration // between the reaper's ticks: workerTick
	tick    uint64        // advanced by the reaper
	reaper  *time.Timer
	reaping bool // the reaper is armed
}

type attemptWorker struct {
	pool *attemptWorkers
	// next is the worker's next attempt, handed over by a signal on wake;
	// nil tells it to exit.
	next *attempt
	wake chan struct{}
	// r is the result of an attempt that returned in time; whoever takes
	// it returns the worker to the pool (see attempt.taken). It is the
	// worker's, not the attempt's: only used while an attempt runs on it,
	// so an execution's record need not carry it.
	r attemptResult
	// parked is the tick the worker parked in; guarded by pool.mu.
	parked uint64
	// exited is set before the result is delivered when the handler ended
	// its goroutine (runtime.Goexit): the worker is gone.
	exited bool
}

func newAttemptWorkers() *attemptWorkers {
	return &attemptWorkers{max: max(minIdleWorkers, workersPerProc*runtime.GOMAXPROCS(0)), period: workerTick}
}

// start runs a on a parked worker, or on a new goroutine.
func (p *attemptWorkers) start(a *attempt) {
	if a.x.bubbled() { // a goroutine of its own, with a worker of its own that never parks
		a.w = new(attemptWorker)
		go a.run()
		return
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		a.w = w
		w.next = a
		w.wake <- struct{}{} // buffered, and empty while the worker is parked
		return
	}
	p.mu.Unlock()
	w := &attemptWorker{pool: p, wake: make(chan struct{}, 1)}
	a.w = w
	go w.work(a)
}

// work runs attempts until the pool retires the worker.
func (w *attemptWorker) work(a *attempt) {
	for ; a != nil; a, w.next = w.next, nil {
		// Profiler labels follow the call's context, as they would follow
		// a goroutine started by the serving one.
		pprof.SetGoroutineLabels(a)
		if !a.run() {
			// Abandoned: nobody takes a result from it, so the worker
			// returns itself.
			w.pool.put(w)
		}
		park(w.wake, nil)
	}
}

// put parks w for the next attempt, or tells it to exit when enough
// workers are parked already.
func (p *attemptWorkers) put(w *attemptWorker) {
	if w.exited || p == nil { // gone, or a bubbled attempt's own
		return
	}
	p.mu.Lock()
	if len(p.idle) >= p.max {
		p.mu.Unlock()
		w.wake <- struct{}{} // with no next attempt: exit
		return
	}
	w.parked = p.tick
	p.idle = append(p.idle, w)
	if !p.reaping {
		p.reaping = true
		if p.reaper == nil {
			p.reaper = time.AfterFunc(p.period, p.reap)
		} else {
			p.reaper.Reset(p.period)
		}
	}
	p.mu.Unlock()
}

// reap retires the workers parked for workerIdleTicks ticks or more. The
// oldest are first in idle: a worker's park tick only grows while it is
// there.
func (p *attemptWorkers) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tick++
	n := 0
	for n < len(p.idle) && p.tick-p.idle[n].parked >= workerIdleTicks {
		p.idle[n].wake <- struct{}{} // with no next attempt: exit
		n++
	}
	if n > 0 {
		m := copy(p.idle, p.idle[n:])
		clear(p.idle[m:])
		p.idle = p.idle[:m]
	}
	if len(p.idle) == 0 {
		p.reaping = false
		return
	}
	p.reaper.Reset(p.period)
}

// bubbled reports whether the calling goroutine runs in a testing/synctest
// bubble: there time.Now carries no monotonic clock reading, which it
// always does outside one on the platforms Go reads a monotonic clock on
// (elsewhere, attempts simply get a goroutine each).
func bubbled() bool {
	t := time.Now()
	return t == t.Round(0)
}

// bubbled is bubbled for the execution's goroutine, from the time it
// started when that was read from time.Now.
func (x *execution) bubbled() bool {
	if x.e.realClock {
		return x.start == x.start.Round(0)
	}
	return bubbled()
}
