package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// readyTimeout bounds how long a started process may take to answer.
const readyTimeout = 10 * time.Second

// pollInterval is the pause between readiness probes.
const pollInterval = 20 * time.Millisecond

// startAttempts is how many free ports Start tries before giving up: another
// process may take a port between our probe and the server's bind.
const startAttempts = 5

// errPortInUse reports that the server lost the race for its port.
var errPortInUse = errors.New("address already in use")

// instance is one redis-server child process on a fixed port.
type instance struct {
	bin  string
	args []string // after --port P
	port int

	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{} // closed once the process has exited
}

func (in *instance) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) }

// start runs the process and waits until it answers PING. It reports
// errPortInUse when the port was taken.
func (in *instance) start() error {
	args := append([]string{"--port", strconv.Itoa(in.port)}, in.args...)
	cmd := exec.Command(in.bin, args...)
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	release, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", in.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // an exit is expected; the log says why
		release()
		close(done)
	}()
	in.cmd, in.out, in.done = cmd, out, done

	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			in.cmd = nil
			if strings.Contains(out.String(), "Address already in use") {
				return errPortInUse
			}
			return fmt.Errorf("%s exited before it was ready:\n%s", in.bin, out.tail())
		default:
		}
		if err := ping(in.addr()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			in.stop()
			return fmt.Errorf("%s on %s not ready after %v: %v\n%s", in.bin, in.addr(), readyTimeout, err, out.tail())
		}
		time.Sleep(pollInterval)
	}
}

// stop kills the process, as a crash would, and waits for it to exit. It is
// a no-op when the process is not running.
func (in *instance) stop() {
	if in.cmd == nil {
		return
	}
	_ = in.cmd.Process.Kill() // fails only if it already exited
	<-in.done
	in.cmd = nil
}

// ping sends one PING and expects +PONG: a server that is still loading
// answers -LOADING instead.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logBuffer collects a child's output for error messages.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the end of the output, enough to show why a start failed.
func (b *logBuffer) tail() string {
	s := b.String()
	if len(s) > 2048 {
		s = "…" + s[len(s)-2048:]
	}
	return s
}
