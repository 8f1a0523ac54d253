package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// readyTimeout bounds how long a started postmaster may take to accept
	// connections (crash recovery included).
	readyTimeout = 30 * time.Second
	// stopTimeout bounds a shutdown before the postmaster is killed.
	stopTimeout = 30 * time.Second
	// pollInterval is the pause between readiness probes.
	pollInterval = 20 * time.Millisecond
	// startAttempts is how many free ports a start tries: another process
	// may take a port between our probe and the postmaster's bind.
	startAttempts = 5
	// superuser is the cluster's superuser; local connections are trusted.
	superuser = "agentsafe"
)

// debianBins is where Debian's postgresql packages put their binaries,
// one directory per major version.
var debianBins = "/usr/lib/postgresql/*/bin"

// errPortInUse reports that the postmaster lost the race for its port.
var errPortInUse = errors.New("address already in use")

// cluster is one PostgreSQL cluster: a data directory made by initdb, and
// the postmaster serving it as a child process.
type cluster struct {
	bin  string // directory of initdb and postgres
	acct account
	dir  string // the temporary root: data/ and the socket
	port int

	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{} // closed once the postmaster has exited
}

// binDir finds the directory holding initdb and postgres: PATH first, then
// Debian's /usr/lib/postgresql/N/bin, the newest version first.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(debianBins)
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		_, err1 := os.Stat(filepath.Join(d, "initdb"))
		_, err2 := os.Stat(filepath.Join(d, "postgres"))
		if err1 == nil && err2 == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres are neither on PATH nor in /usr/lib/postgresql/*/bin")
}

// newCluster runs initdb in a new temporary directory and starts the
// postmaster on a free loopback port.
func newCluster(bin string) (*cluster, error) {
	acct, err := clusterAccount()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agentsafe-pgtest-")
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, acct: acct, dir: dir}
	if err := acct.own(dir); err != nil {
		c.remove()
		return nil, err
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.data(), "-A", "trust", "-U", superuser,
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	acct.apply(initdb)
	if out, err := initdb.CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			c.remove()
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		err = c.start()
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			c.remove()
			return nil, err
		}
	}
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *cluster) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// url is the address of database db as the superuser.
func (c *cluster) url(db string) string {
	return "postgres://" + superuser + "@" + c.addr() + "/" + db + "?sslmode=disable"
}

// start runs the postmaster and waits until it accepts connections. It
// reports errPortInUse when the port was taken.
func (c *cluster) start() error {
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data(), "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off", // a test cluster need not survive the machine
		"-c", "max_connections=300",
		"-c", "log_min_messages=warning")
	c.acct.apply(cmd)
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	release, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // an exit is expected; the log says why
		release()
		close(done)
	}()
	c.cmd, c.out, c.done = cmd, out, done

	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			c.cmd = nil
			if strings.Contains(out.String(), "Address already in use") {
				return errPortInUse
			}
			return fmt.Errorf("postgres exited before it was ready:\n%s", out.tail())
		default:
		}
		err := ping(c.url("postgres"))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			c.stop(syscall.SIGQUIT)
			return fmt.Errorf("postgres on %s not ready after %v: %v\n%s", c.addr(), readyTimeout, err, out.tail())
		}
		time.Sleep(pollInterval)
	}
}

// stop sends the postmaster sig and waits for it to exit: SIGQUIT is an
// immediate shutdown (connections break at once, the next start recovers
// from the WAL, as after a crash), SIGINT a fast one. After stopTimeout
// the postmaster is killed. It is a no-op when the postmaster is not
// running.
func (c *cluster) stop(sig os.Signal) {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(sig) // fails only if it already exited
	select {
	case <-c.done:
	case <-time.After(stopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
}

// remove stops the cluster and deletes its directory.
func (c *cluster) remove() {
	c.stop(syscall.SIGINT)
	_ = os.RemoveAll(c.dir) // a temporary directory; nothing to report
}

// exec runs sql on database db.
func (c *cluster) exec(db, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.url(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql).ReadAll()
	return err
}

// ping opens one connection: a postmaster that is starting or recovering
// refuses it.
func ping(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
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

// logBuffer collects the postmaster's output for error messages.
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
