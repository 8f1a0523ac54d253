package pgtest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner starts children from one goroutine locked to its OS thread while
// any child lives. Linux sends the parent-death signal when the thread that
// forked the child exits, not the process, so forking from an arbitrary
// thread could kill a cluster in the middle of a test. The goroutine ends
// when the last child has been reaped, so goleak sees nothing left behind.
// (internal/redistest has the same spawner for redis-server.)
var spawner struct {
	mu   sync.Mutex
	live int               // children started and not yet reaped
	reqs chan spawnRequest // nil while no spawner goroutine runs
}

type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

// spawn starts cmd so that the kernel kills it when the test binary dies,
// even by SIGKILL or a -timeout panic, when no cleanup runs. On success the
// caller calls release once it has reaped the child with cmd.Wait.
func spawn(cmd *exec.Cmd) (release func(), err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL

	spawner.mu.Lock()
	if spawner.reqs == nil {
		spawner.reqs = make(chan spawnRequest)
		go spawnLoop(spawner.reqs)
	}
	spawner.live++
	reqs := spawner.reqs
	spawner.mu.Unlock()

	release = func() {
		spawner.mu.Lock()
		defer spawner.mu.Unlock()
		if spawner.live--; spawner.live == 0 {
			close(spawner.reqs)
			spawner.reqs = nil
		}
	}
	r := spawnRequest{cmd: cmd, err: make(chan error, 1)}
	reqs <- r
	if err := <-r.err; err != nil {
		release()
		return nil, err
	}
	return release, nil
}

func spawnLoop(reqs <-chan spawnRequest) {
	// Never unlocked: the thread exits with this goroutine, after every
	// child it forked has been reaped.
	runtime.LockOSThread()
	for r := range reqs {
		r.err <- r.cmd.Start()
	}
}
