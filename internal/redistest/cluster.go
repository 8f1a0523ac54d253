package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNodes is the size of the cluster: the fewest masters
// redis-cli --cluster create accepts.
const clusterNodes = 3

// Cluster is a Redis Cluster of three masters and no replicas for one test.
type Cluster struct {
	nodes []*instance

	mu      sync.Mutex
	clients []*redis.ClusterClient
}

// StartCluster starts three redis-server nodes in cluster mode on free
// loopback ports, each with its own t.TempDir(), joins them with
// redis-cli --cluster create, waits until every node reports
// cluster_state:ok (at most 10 s), and stops them when tb ends. Without
// redis-server and redis-cli on PATH it skips tb, or fails it if
// AGENTSAFE_REQUIRE_REDIS=1: miniredis cannot play a cluster.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	server, errServer := exec.LookPath("redis-server")
	cli, errCLI := exec.LookPath("redis-cli")
	if err := errors.Join(errServer, errCLI); err != nil {
		if requireRedis() {
			tb.Fatalf("redistest: a cluster needs redis-server and redis-cli on PATH and %s=1 forbids skipping; install them (apt-get install redis-server redis-tools): %v", requireEnv, err)
		}
		tb.Skipf("redistest: skipping: a Redis Cluster needs redis-server and redis-cli on PATH (set %s=1 to fail instead): %v", requireEnv, err)
	}

	c := &Cluster{}
	tb.Cleanup(c.cleanup)
	for range clusterNodes {
		c.nodes = append(c.nodes, startClusterNode(tb, server))
	}

	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, cli, args...)
	create.Stdin = strings.NewReader("yes\n")
	if out, err := create.CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	if err := c.waitOK(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return c
}

// startClusterNode starts one cluster-enabled node, retrying on a few
// ports if one is taken. The cluster bus gets a free port of its own rather
// than port+10000, which may be taken or out of range.
func startClusterNode(tb testing.TB, bin string) *instance {
	tb.Helper()
	dir := tb.TempDir()
	for attempt := 1; ; attempt++ {
		port, err1 := freePort()
		bus, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		n := &instance{bin: bin, port: port, args: []string{
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", dir,
			"--cluster-enabled", "yes",
			"--cluster-config-file", dir + "/nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
		}}
		err := n.start()
		if err == nil {
			return n
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			tb.Fatalf("redistest: cluster node: %v", err)
		}
	}
}

// waitOK polls CLUSTER INFO on every node until all of them see the whole
// cluster and every slot covered.
func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(readyTimeout)
	want := "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))
	for _, n := range c.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
		for {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				_ = rdb.Close()
				return fmt.Errorf("cluster node %s not ok after %v: %v\n%s", n.addr(), readyTimeout, err, info)
			}
			time.Sleep(pollInterval)
		}
		_ = rdb.Close()
	}
	return nil
}

// Addrs returns the "127.0.0.1:port" of every node.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return addrs
}

// Client returns a new cluster client seeded with every node, closed when
// the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.mu.Lock()
	c.clients = append(c.clients, rdb)
	c.mu.Unlock()
	return rdb
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	clients := c.clients
	c.clients = nil
	c.mu.Unlock()
	for _, rdb := range clients {
		_ = rdb.Close() // the nodes are going away; nothing to report
	}
	for _, n := range c.nodes {
		n.stop()
	}
}
