package redisnode

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batch runs the stores' scripts, each over one key, sending concurrent
// ones to Redis together. A script that finds none in flight runs alone,
// as one EVALSHA: a lone caller pays nothing for batching. One that
// arrives while others are in flight is queued, and a flusher goroutine
// (one per burst, up to maxFlushers, never one per call; each exits when
// the queue is empty) sends everything queued as one pipeline, then
// whatever queued meanwhile as the next. Redis then reads and answers many
// scripts per system call, which at 64 callers is much of the cost of
// each: throughput rises with load instead of stalling on Redis's one
// thread. Every script stays one atomic step over one key; a pipeline only
// shares the round trip (on a Cluster go-redis splits it by node).
//
// A queued script whose caller leaves before it is sent returns the
// context's error and never reaches Redis. Once sent, it waits for its
// reply, bounded by the client's timeouts, so that the caller learns what
// Redis did. A pipeline runs under context.Background: it is many
// callers' work, and no one caller's cancellation may cut it short.
type Batch struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	alone    int // scripts running on their own
	queue    []*pending
	flushers int // flushers running, at most maxFlushers
}

// NewBatch returns a Batch that runs scripts on rdb.
func NewBatch(rdb redis.UniversalClient) *Batch { return &Batch{rdb: rdb} }

// pending is one queued script and, once sent, its reply.
type pending struct {
	sc   *redis.Script
	key  string
	args []any
	sent bool // taken by a flusher: its reply is coming
	r    []any
	err  error
	done chan struct{}
}

// maxBatch bounds one pipeline; more waits for the next. maxFlushers
// bounds the pipelines in flight at once: with one, Redis would idle while
// the client reads a batch's replies and sends the next.
const (
	maxBatch    = 128
	maxFlushers = 4
)

// Run runs sc over key with args, alone or batched, and returns its reply
// as a slice (the stores' scripts all reply with a table).
func (b *Batch) Run(ctx context.Context, sc *redis.Script, key string, args ...any) ([]any, error) {
	b.mu.Lock()
	if b.alone == 0 && b.flushers == 0 {
		b.alone++
		b.mu.Unlock()
		v, err := sc.Run(ctx, b.rdb, []string{key}, args...).Slice()
		b.mu.Lock()
		b.alone--
		b.mu.Unlock()
		return v, err
	}
	p := &pending{sc: sc, key: key, args: args, done: make(chan struct{})}
	b.queue = append(b.queue, p)
	if b.flushers < maxFlushers {
		b.flushers++
		go b.flush()
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
		for i, q := range b.queue {
			if q == p {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return nil, ctx.Err() // as go-redis answers a call cancelled before it is sent
	}
	b.mu.Unlock()
	// Sent: only its reply says what Redis did, so wait for it (the
	// client's timeouts bound the wait) rather than leave the caller
	// guessing, as a lone script whose reply was cut off must.
	<-p.done
	return p.r, p.err
}

// flush sends the queue as pipelines until it is empty.
func (b *Batch) flush() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.flushers--
			b.mu.Unlock()
			return
		}
		batch := make([]*pending, n)
		copy(batch, b.queue)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		for _, p := range batch {
			p.sent = true
		}
		b.mu.Unlock()
		b.send(batch)
	}
}

// send runs one batch as a pipeline of EVALSHA. A script Redis no longer
// has (a restart, SCRIPT FLUSH, a failover) is sent again with its
// source, on its own, as Script.Run would.
func (b *Batch) send(batch []*pending) {
	ctx := context.Background() // many callers' work: see Batch
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error { // each command's error is read below
		for i, p := range batch {
			cmds[i] = p.sc.EvalSha(ctx, pl, []string{p.key}, p.args...)
		}
		return nil
	})
	for i, p := range batch {
		cmd := cmds[i]
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			cmd = p.sc.Eval(ctx, b.rdb, []string{p.key}, p.args...)
		}
		p.r, p.err = cmd.Slice()
		close(p.done)
	}
}
