package auditpg

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/agentsafe/agentsafe/internal/auditchain"
)

// Queryer runs queries: a connection or a transaction.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// selectSQL reads every record, each chain in chain_seq order (and rows
// sharing one chain_seq in insertion order), unchained rows last.
var selectSQL = selectFrom("agentsafe.audit_events") + " ORDER BY chain, chain_seq, seq"

// selectFrom is the select list of a record, from table.
func selectFrom(table string) string {
	var cols, ints []string
	for _, f := range textColumns {
		cols = append(cols, column(f))
	}
	for _, f := range bigintColumns {
		ints = append(ints, column(f))
	}
	return "SELECT seq, " + strings.Join(cols, ", ") +
		", at, attempt, attempts, retryable, succeeded, duration, chain_seq, prev, hash, signature, altered, " +
		strings.Join(ints, ", ") + ", retry_after FROM " + table
}

// Verify feeds v every record of the table, then checks the approval and
// result tables against the trail (see [CrossCheck]). The error is an
// input error: the table cannot be read.
func Verify(ctx context.Context, conn Queryer, v *auditchain.Verifier) error {
	// Rows without a chain are legacy when they were stored before the
	// trail was chained: before the first chained row, and before
	// migration 0008 was applied. Any other is inserted: whoever writes
	// the table can give a row a seq below the first chained one
	// (OVERRIDING SYSTEM VALUE), but then must also backdate its
	// recorded_at, and the row is reported as not verified, never as
	// part of a chain.
	var firstChained pgtype.Int8
	if err := conn.QueryRow(ctx, `SELECT min(seq) FROM agentsafe.audit_events WHERE chain IS NOT NULL`).Scan(&firstChained); err != nil {
		return fmt.Errorf("read agentsafe.audit_events: %w", err)
	}
	late := map[int64]bool{}
	rows, err := conn.Query(ctx, `SELECT seq FROM agentsafe.audit_events WHERE chain IS NULL
		AND recorded_at >= (SELECT applied_at FROM agentsafe.schema_migrations WHERE version = 8)`)
	if err != nil {
		return fmt.Errorf("read agentsafe.audit_events: %w", err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return fmt.Errorf("read agentsafe.audit_events: %w", err)
		}
		late[seq] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read agentsafe.audit_events: %w", err)
	}
	err = Read(ctx, conn, "", func(e auditchain.Entry, _ *auditchain.Record, err error) {
		switch {
		case err != nil:
			v.AddUnreadable(fmt.Sprintf("row %d: %v", e.Pos, err))
		case e.Chain == "" && (late[e.Pos] || firstChained.Valid && e.Pos > firstChained.Int64):
			v.AddUnchained(e.Pos, fmt.Sprintf("row seq %d", e.Pos))
		case e.Chain == "":
			v.AddLegacy()
		default:
			v.Add(e)
		}
	})
	if err != nil {
		return err
	}
	return CrossCheck(ctx, conn, v)
}

// Read reads the records of the table (those matching where, a SQL
// condition, when not empty), each chain in chain_seq order, and hands
// each to fn with the hash its content gives; an unchained row has an
// empty Chain; a row that cannot be scanned comes with its error. The
// error is the table's: it cannot be read.
func Read(ctx context.Context, conn Queryer, where string, fn func(auditchain.Entry, *auditchain.Record, error)) error {
	q := selectSQL
	if where != "" {
		q = selectFrom("agentsafe.audit_events") + " WHERE " + where + " ORDER BY chain, chain_seq, seq"
	}
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("read agentsafe.audit_events: %w", err)
	}
	defer rows.Close()
	var (
		pos       int64
		texts     = make([]pgtype.Text, len(textColumns))
		at        pgtype.Timestamptz
		attempt   pgtype.Int4
		attempts  pgtype.Int4
		retryable pgtype.Bool
		succeeded pgtype.Bool
		duration  pgtype.Interval
		chainSeq  pgtype.Int8
		prev      pgtype.Text
		hash      pgtype.Text
		signature []byte
		altered   []string
		bigints   = make([]pgtype.Int8, len(bigintColumns))
		retry     pgtype.Interval
	)
	dest := []any{&pos}
	for i := range texts {
		dest = append(dest, &texts[i])
	}
	dest = append(dest, &at, &attempt, &attempts, &retryable, &succeeded, &duration, &chainSeq, &prev, &hash, &signature, &altered)
	for i := range bigints {
		dest = append(dest, &bigints[i])
	}
	dest = append(dest, &retry)
	var buf []byte
	chainAt := len(textColumns) - 1 // Chain is the last text column
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			fn(auditchain.Entry{Pos: pos}, nil, err)
			continue
		}
		e := auditchain.Entry{Pos: pos, Chain: texts[chainAt].String}
		var r auditchain.Record
		for i, f := range textColumns {
			if texts[i].Valid {
				r.SetString(f, texts[i].String)
			}
		}
		var problems []string
		if at.Valid && at.InfinityModifier == pgtype.Finite {
			r.SetTime(at.Time)
		} else {
			problems = append(problems, "at is not a time")
		}
		if attempt.Valid {
			r.SetInt(auditchain.Attempt, int64(attempt.Int32))
		}
		if attempts.Valid {
			r.SetInt(auditchain.Attempts, int64(attempts.Int32))
		}
		if retryable.Valid {
			r.SetBool(auditchain.Retryable, retryable.Bool)
		}
		if succeeded.Valid {
			r.SetBool(auditchain.Succeeded, succeeded.Bool)
		}
		if altered != nil {
			r.SetStrings(auditchain.Altered, append([]string{}, altered...))
		}
		if duration.Valid {
			r.SetInt(auditchain.DurationUS, micros(duration))
		}
		for i, f := range bigintColumns {
			if bigints[i].Valid {
				r.SetInt(f, bigints[i].Int64)
			}
		}
		if retry.Valid {
			r.SetInt(auditchain.RetryAfterUS, micros(retry))
		}
		if chainSeq.Valid && chainSeq.Int64 > 0 {
			e.Seq = uint64(chainSeq.Int64)
			r.SetInt(auditchain.ChainSeq, chainSeq.Int64)
		} else {
			problems = append(problems, "chain_seq is not a positive integer")
		}
		if h, ok := auditchain.ParseHash(prev.String); prev.Valid && ok {
			e.Prev = h
			r.SetPrev(h)
		} else {
			problems = append(problems, "prev is not a hash")
		}
		if h, ok := auditchain.ParseHash(hash.String); hash.Valid && ok {
			e.Stored = h
		} else {
			problems = append(problems, "hash is not a hash")
		}
		if r.IsCheckpoint() {
			e.Checkpoint, e.Final, e.Time = true, r.String(auditchain.Type) == auditchain.CloseType, r.TimeValue()
			if signature != nil {
				e.Signature = append([]byte(nil), signature...)
			}
		}
		if len(problems) > 0 {
			e.Problem = strings.Join(problems, ", ")
		} else {
			buf = r.AppendCanonical(buf[:0])
			e.Computed = auditchain.Sum(e.Prev, buf)
		}
		fn(e, &r, nil)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read agentsafe.audit_events: %w", err)
	}
	return nil
}

// micros is an interval in microseconds, a month taken as 30 days.
func micros(i pgtype.Interval) int64 {
	return int64(i.Months)*30*86400e6 + int64(i.Days)*86400e6 + i.Microseconds
}

// CrossCheck reports every approval decided, consumed or given an
// outcome, and every stored result, whose execution has no record in a
// valid chain where it must: the capability.requested record of the
// execution that requested a decided approval; the requested and started
// records of the execution that consumed one; the requested and started
// records of the execution that produced a stored result (its records are
// written before anything runs, so they are there whenever it ran). A
// record in a chain counts unless verification flagged it. Approvals and
// results from before migration 0008 was applied (when the trail became
// chained) are not checked.
func CrossCheck(ctx context.Context, conn Queryer, v *auditchain.Verifier) error {
	flagged := v.Flagged()
	const has = `EXISTS (SELECT 1 FROM agentsafe.audit_events e WHERE e.execution_id = %s AND e.type = '%s'
		AND e.chain IS NOT NULL AND NOT e.seq = ANY($1))`
	req := func(x string) string { return fmt.Sprintf(has, x, "capability.requested") }
	start := func(x string) string { return fmt.Sprintf(has, x, "capability.started") }
	// Approvals and results from before the trail was chained (migration
	// 0008) have no chained records to find.
	const since = `(SELECT applied_at FROM agentsafe.schema_migrations WHERE version = 8)`
	approvals := `SELECT a.id, a.requested_by, a.consumed_by, a.status,
		a.decided_at IS NOT NULL AND NOT ` + req("a.requested_by") + `,
		a.consumed_by <> '' AND NOT (` + req("a.consumed_by") + ` AND ` + start("a.consumed_by") + `)
	FROM agentsafe.approvals a
	WHERE a.requested_at >= ` + since + ` AND (a.decided_at IS NOT NULL OR a.consumed_by <> '' OR a.outcome_status <> '')
	ORDER BY a.requested_at, a.id`
	rows, err := conn.Query(ctx, approvals, flagged)
	if err != nil {
		return fmt.Errorf("read agentsafe.approvals: %w", err)
	}
	for rows.Next() {
		var id, by, consumer, status string
		var noRequest, noRun bool
		if err := rows.Scan(&id, &by, &consumer, &status, &noRequest, &noRun); err != nil {
			rows.Close()
			return fmt.Errorf("read agentsafe.approvals: %w", err)
		}
		if noRequest {
			v.AddFinding(auditchain.Finding{Kind: auditchain.Deleted,
				Detail: fmt.Sprintf("approval %s (%s): the capability.requested record of %s, which requested it, is in no valid chain", id, status, by)})
		}
		if noRun {
			v.AddFinding(auditchain.Finding{Kind: auditchain.Deleted,
				Detail: fmt.Sprintf("approval %s (%s): the capability.requested and .started records of %s, which consumed it, are not both in a valid chain", id, status, consumer)})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read agentsafe.approvals: %w", err)
	}
	results := `SELECT r.key, r.result_execution_id FROM agentsafe.results r
	WHERE r.state = 'done' AND r.claimed_at >= ` + since + `
		AND NOT (` + req("r.result_execution_id") + ` AND ` + start("r.result_execution_id") + `)
	ORDER BY r.claimed_at, r.key`
	rows, err = conn.Query(ctx, results, flagged)
	if err != nil {
		return fmt.Errorf("read agentsafe.results: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, exe string
		if err := rows.Scan(&key, &exe); err != nil {
			return fmt.Errorf("read agentsafe.results: %w", err)
		}
		v.AddFinding(auditchain.Finding{Kind: auditchain.Deleted,
			Detail: fmt.Sprintf("stored result %s: the capability.requested and .started records of %s, which produced it, are not both in a valid chain", key, exe)})
	}
	return rows.Err()
}
