package redisnode

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batch runs the stores' scripts, each over one key, sending concurrent
// ones to the same Redis node together. A script that finds none in flight
// on its node runs alone, as one EVALSHA: a lone caller pays nothing for
// batching. One that arrives while others are in flight there is queued,
// and a flusher goroutine (one per burst, up to maxFlushers per node,
// never one per call; each exits when its queue is empty) sends everything
// queued as one pipeline, then whatever queued meanwhile as the next.
// Redis then reads and answers many scripts per system call, which at 64
// callers is much of the cost of each: throughput rises with load instead
// of stalling on Redis's one thread. Every script stays one atomic step
// over one key; a pipeline only shares the round trip.
//
// Each node has its own queue, so a slow or unreachable node holds up only
// the scripts for its own keys: on a Cluster the node is the key's master
// (a redirect is followed by running that script again through the
// Cluster client), on a Ring the key's shard; any other client is one
// node.
//
// A queued script whose caller leaves before it is sent returns the
// context's error and never reaches Redis. Once sent, it waits for its
// reply, so that the caller learns what Redis did; a pipeline carries the
// latest deadline of its callers' contexts (when every one has a deadline,
// which go-redis applies with ContextTimeoutEnabled) and otherwise the
// client's own timeouts bound it. Hooks see that context, not a caller's.
//
// go-redis's own AutoPipeliner (v9.23) does this and more, but it is
// marked experimental, changes between releases, and holds connections and
// goroutines until Close, while the stores take the application's client
// and have no Close.
type Batch struct {
	rdb redis.UniversalClient

	mu    sync.Mutex
	nodes map[string]*lane // by node address ("" for a single-node client)
	one   lane             // the single-node client's
}

// lane is one node's queue.
type lane struct {
	node     redis.Cmdable // where its pipelines go
	alone    int           // scripts running on their own
	queue    []*pending
	flushers int // flushers running, at most maxFlushers
}

// NewBatch returns a Batch that runs scripts on rdb.
func NewBatch(rdb redis.UniversalClient) *Batch {
	return &Batch{rdb: rdb, nodes: map[string]*lane{}, one: lane{node: rdb}}
}

// pending is one queued script and, once sent, its reply.
type pending struct {
	ctx  context.Context
	sc   *redis.Script
	key  string
	args []any
	sent bool // taken by a flusher: its reply is coming
	r    []any
	err  error
	done chan struct{}
}

// maxBatch bounds one pipeline; more waits for the next. maxFlushers
// bounds a node's pipelines in flight at once: with one, Redis would idle
// while the client reads a batch's replies and sends the next.
const (
	maxBatch    = 128
	maxFlushers = 4
)

// Run runs sc over key with args, alone or batched, and returns its reply
// as a slice (the stores' scripts all reply with a table).
func (b *Batch) Run(ctx context.Context, sc *redis.Script, key string, args ...any) ([]any, error) {
	l := b.lane(ctx, key)
	if l == nil {
		return sc.Run(ctx, b.rdb, []string{key}, args...).Slice()
	}
	b.mu.Lock()
	if l.alone == 0 && l.flushers == 0 {
		l.alone++
		b.mu.Unlock()
		v, err := sc.Run(ctx, b.rdb, []string{key}, args...).Slice()
		b.mu.Lock()
		l.alone--
		b.mu.Unlock()
		return v, err
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return nil, err // as go-redis answers a call whose context is done: nothing sent
	}
	p := &pending{ctx: ctx, sc: sc, key: key, args: args, done: make(chan struct{})}
	l.queue = append(l.queue, p)
	if l.flushers < maxFlushers {
		l.flushers++
		go b.flush(l)
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.r, p.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !p.sent {
		// Not sent: nothing reached Redis, and nothing will.
		for i, q := range l.queue {
			if q == p {
				n := copy(l.queue[i:], l.queue[i+1:])
				l.queue[i+n] = nil
				l.queue = l.queue[:i+n]
				break
			}
		}
		b.mu.Unlock()
		return nil, ctx.Err() // as go-redis answers a call cancelled before it is sent
	}
	b.mu.Unlock()
	// Sent: only its reply says what Redis did, so wait for it rather than
	// leave the caller guessing, as a lone script whose reply was cut off
	// must.
	<-p.done
	return p.r, p.err
}

// lane returns the queue of the node key lives on, or nil when the script
// should run alone (a Cluster or Ring that cannot name the node now).
func (b *Batch) lane(ctx context.Context, key string) *lane {
	var node *redis.Client
	var err error
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		node, err = c.MasterForKey(ctx, key)
	case *redis.Ring:
		node, err = c.GetShardClientForKey(key)
	default:
		return &b.one
	}
	if err != nil {
		return nil // the client itself reports it, or finds the node
	}
	addr := node.Options().Addr
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.nodes[addr]
	if !ok || l.node != node {
		if ok && (l.alone > 0 || l.flushers > 0) {
			return nil // the address's client was replaced while busy: run alone
		}
		l = &lane{node: node}
		b.nodes[addr] = l
	}
	return l
}

// flush sends l's queue as pipelines until it is empty.
func (b *Batch) flush(l *lane) {
	for {
		b.mu.Lock()
		n := min(len(l.queue), maxBatch)
		if n == 0 {
			l.flushers--
			b.mu.Unlock()
			return
		}
		batch := make([]*pending, n)
		copy(batch, l.queue)
		rest := copy(l.queue, l.queue[n:])
		clear(l.queue[rest:])
		l.queue = l.queue[:rest]
		for _, p := range batch {
			p.sent = true
		}
		b.mu.Unlock()
		b.send(l, batch)
	}
}

// send runs one batch as a pipeline of EVALSHA on its node. Scripts the
// node no longer has (a restart, SCRIPT FLUSH, a failover) are sent again
// with their source, in one more pipeline; a script whose key moved (a
// Cluster resharding) runs again through the Cluster client, which follows
// the redirect.
func (b *Batch) send(l *lane, batch []*pending) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	cmds := make([]*redis.Cmd, len(batch))
	_, perr := l.node.Pipelined(ctx, func(pl redis.Pipeliner) error { // each command's error is read below
		for i, p := range batch {
			cmds[i] = p.sc.EvalSha(ctx, pl, []string{p.key}, p.args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, perr2 := l.node.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, i := range again {
				p := batch[i]
				cmds[i] = p.sc.Eval(ctx, pl, []string{p.key}, p.args...)
			}
			return nil
		})
		if perr2 != nil {
			perr = perr2
		}
	}
	for i, p := range batch {
		cmd := cmds[i]
		if redis.HasErrorPrefix(cmd.Err(), "MOVED") || redis.HasErrorPrefix(cmd.Err(), "ASK") {
			cmd = p.sc.Run(ctx, b.rdb, []string{p.key}, p.args...)
		}
		if cmd.Err() == nil && cmd.Val() == nil && perr != nil {
			// The pipeline failed before its commands ran (a hook refused
			// it, say): that error is theirs.
			p.err = perr
		} else {
			p.r, p.err = cmd.Slice()
		}
		close(p.done)
	}
}

// batchContext is the context a batch's pipelines run under: no caller's
// cancellation (it is many callers' work), and the latest of their
// deadlines when every one has a deadline.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
