// Package redisnode holds what the Redis stores (approvalstore,
// resultstore) share: what they do on every node of a client (a Cluster's
// masters, a Ring's shards, or the one node), and the batching of
// concurrent scripts into pipelines (Batch, which approvalstore's Consume
// uses).
package redisnode

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ForEachMaster calls fn on every master of client: each master of a
// Cluster, each shard of a Ring, or the client itself.
func ForEachMaster(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, node redis.Cmdable) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	default:
		return fn(ctx, client)
	}
}

// LoadScripts loads scripts (SCRIPT LOAD) on every master of client, so
// that the first call of each is an EVALSHA; a script later missing from a
// node's cache is sent again by go-redis's Script.Run.
func LoadScripts(ctx context.Context, client redis.UniversalClient, scripts []*redis.Script) error {
	return ForEachMaster(ctx, client, func(ctx context.Context, node redis.Cmdable) error {
		for _, sc := range scripts {
			if err := sc.Load(ctx, node).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}
