package approvalstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// maxClaims bounds Create's attempts to claim a place in the pending index
// while other Creates of the same requester change it.
const maxClaims = 4

// Create implements [store.ApprovalStore]. It writes the record (one
// script on the record's key), then claims its place in the requester's
// pending index (one script on the index's key). If the index holds a
// pending record for the same call, or the requester is at the cap, the new
// record is deleted again and the older record, or ErrTooManyPending, is
// returned.
func (s *Redis) Create(ctx context.Context, req store.ApprovalRequest) (store.ApprovalRecord, error) {
	if err := checkRequest(req); err != nil {
		return store.ApprovalRecord{}, err
	}
	index := s.pendingKey(req.Audience, req.Requester)
	field := pendingField(req)
	// The common repeat, a caller asking again while its request waits, is
	// answered without writing.
	if v, err := s.rdb.HGet(ctx, index, field).Result(); err == nil {
		if rec, ok, err := s.samePending(ctx, entryID(v), req); err != nil || ok {
			return rec, err
		}
	} else if !errors.Is(err, redis.Nil) {
		return store.ApprovalRecord{}, err
	}

	key := s.recordKey(req.ID)
	args := append([]any{micros(req.ExpiresIn), micros(s.cfg.retention), req.RequestedBy, req.Digest}, requestFields(req)...)
	r, err := s.run(ctx, createScript, key, args...)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	if r.status() == "taken" {
		return store.ApprovalRecord{}, fmt.Errorf("approvalstore: id %s already exists", req.ID)
	}
	requestedAt, err1 := r.str(1)
	expiresAt, err2 := r.str(2)
	if err := errors.Join(err1, err2); err != nil {
		return store.ApprovalRecord{}, err
	}
	rec := store.ApprovalRecord{ApprovalRequest: req, Status: store.ApprovalPending, RequestedAt: unixMicro(requestedAt), ExpiresAt: unixMicro(expiresAt)}
	rec.Reasons = slices.Clone(req.Reasons)
	rec.Requester.OnBehalfOf = slices.Clone(req.Requester.OnBehalfOf)

	var drop []any
	for range maxClaims {
		r, err := s.run(ctx, pendingScript, index, append([]any{field, req.ID, expiresAt, s.cfg.maxPending}, drop...)...)
		if err != nil {
			return s.discard(ctx, key, err)
		}
		switch r.status() {
		case "ok":
			return rec, nil
		case "exists":
			id, err := r.str(1)
			if err != nil {
				return s.discard(ctx, key, err)
			}
			if id == req.ID { // our own claim, retried after a lost reply
				return rec, nil
			}
			other, ok, err := s.samePending(ctx, id, req)
			if err != nil {
				return s.discard(ctx, key, err)
			}
			if ok {
				_, _ = s.discard(ctx, key, nil)
				return other, nil
			}
			drop = []any{id}
		case "full":
			live, err := r.list(1)
			if err != nil {
				return s.discard(ctx, key, err)
			}
			stale, err := s.stale(ctx, live)
			if err != nil {
				return s.discard(ctx, key, err)
			}
			if len(stale) == 0 {
				return s.discard(ctx, key, fmt.Errorf("%w: %d pending", store.ErrTooManyPending, len(live)))
			}
			drop = stale
		default:
			return s.discard(ctx, key, fmt.Errorf("approvalstore: unexpected script reply %v", []any(r)))
		}
	}
	return s.discard(ctx, key, fmt.Errorf("approvalstore: the pending approvals of %s keep changing; try again", req.Requester.ID))
}

// samePending returns the record id if it is pending for the same call as
// req. An index entry that says otherwise is stale.
func (s *Redis) samePending(ctx context.Context, id string, req store.ApprovalRequest) (store.ApprovalRecord, bool, error) {
	rec, err := s.Get(ctx, id)
	if errors.Is(err, store.ErrApprovalNotFound) {
		return store.ApprovalRecord{}, false, nil
	}
	if err != nil {
		return store.ApprovalRecord{}, false, err
	}
	ok := rec.Status == store.ApprovalPending && rec.Audience == req.Audience && store.SameActor(rec.Requester, req.Requester) &&
		rec.Procedure == req.Procedure && rec.Digest == req.Digest && rec.PreviewDigest == req.PreviewDigest
	return rec, ok, nil
}

// stale returns those of ids whose records are no longer pending, or gone.
// Once stale, an entry stays stale: records never return to pending and ids
// are never reused.
func (s *Redis) stale(ctx context.Context, ids []string) ([]any, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, s.recordKey(id), "status")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []any
	for i, c := range cmds {
		if st, err := c.Result(); errors.Is(err, redis.Nil) || (err == nil && st != store.ApprovalPending.String()) {
			out = append(out, ids[i])
		}
	}
	return out, nil
}

// discard deletes a new record that Create does not hand out, and returns
// err. If the delete fails too, the record stays pending until it expires:
// nobody was given its id, so it can never be consumed.
func (s *Redis) discard(ctx context.Context, key string, err error) (store.ApprovalRecord, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
	defer cancel()
	_ = s.rdb.Del(ctx, key).Err() // best effort, see above
	return store.ApprovalRecord{}, err
}

// pendingField is the field of req's call in its requester's pending
// index: the procedure, the digest and the rest of the whole actor (the
// index's key has its audience, tenant and id), so that one session's
// pending call is never another's, and the preview digest, if any, so
// that a changed preview is another request (without one, the field is
// as before previews: records made then are still found).
func pendingField(req store.ApprovalRequest) string {
	a := req.Requester
	f := req.Procedure + "\n" + req.Digest + "\n" + ids.Derive("", append([]string{a.Kind}, a.OnBehalfOf...)...)
	if req.PreviewDigest != "" {
		f += "\n" + req.PreviewDigest
	}
	return f
}

// entryID returns the id of a pending-index entry, "id expires_at".
func entryID(v string) string {
	id, _, _ := strings.Cut(v, " ")
	return id
}
