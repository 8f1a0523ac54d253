// Package auditpg stores hash-chained audit records in PostgreSQL
// (agentsafe.audit_events, migration 0008 of package agentsafepg) and
// reads them back for verification: one place for the columns, so that
// what the sink hashes and what the verifier recomputes cannot drift.
//
// A record's fields are columns of the same names ("time" is at,
// "duration_us" the interval duration, "retry_after_us" the interval
// retry_after; the budget columns come with migration 0009); an absent
// field is NULL. The
// columns the database fills in (seq, recorded_at) are not part of the
// record; seq is the insertion order the verifier holds each chain to.
package auditpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/agentsafe/agentsafe/internal/auditchain"
)

// textColumns are the text columns of a record, in the order of the
// insert's arrays and of the select.
var textColumns = []auditchain.Field{
	auditchain.Type, auditchain.ExecutionID, auditchain.Procedure, auditchain.ActorID, auditchain.ActorTenant,
	auditchain.InputDigest, auditchain.SideEffect, auditchain.Risk, auditchain.PreviousErrorCode, auditchain.Code,
	auditchain.ApprovalID, auditchain.ApproverID, auditchain.ApproverTenant, auditchain.Comment, auditchain.Reason,
	auditchain.Error, auditchain.Stack, auditchain.ReplayOf, auditchain.Budget, auditchain.Chain,
}

// bigintColumns are the bigint columns of a record's fields, in the
// order of the insert's arrays and of the select.
var bigintColumns = []auditchain.Field{auditchain.BudgetAmount, auditchain.BudgetSpent, auditchain.BudgetLimit}

// column is the column a field is stored in.
func column(f auditchain.Field) string {
	switch f {
	case auditchain.Time:
		return "at"
	case auditchain.DurationUS:
		return "duration"
	case auditchain.RetryAfterUS:
		return "retry_after"
	}
	return f.Name()
}

// insertSQL writes a batch in one statement, in order: one array per
// column, NULL for what a record does not have.
var insertSQL = func() string {
	var cols, sel, from, names string
	n := 0
	add := func(col, typ string) {
		n++
		if n > 1 {
			cols += ", "
			sel += ", "
			from += ", "
			names += ", "
		}
		cols += col
		if col == "altered" {
			sel += "string_to_array(r.altered, ',')"
		} else {
			sel += "r." + col
		}
		from += fmt.Sprintf("$%d::%s[]", n, typ)
		names += col
	}
	for _, f := range textColumns {
		add(column(f), "text")
	}
	add("at", "timestamptz")
	add("attempt", "int")
	add("attempts", "int")
	add("retryable", "bool")
	add("succeeded", "bool")
	add("duration", "interval")
	add("chain_seq", "bigint")
	add("prev", "text")
	add("hash", "text")
	add("signature", "bytea")
	// A row's altered fields, joined by commas (a field's name has none):
	// arrays of arrays must all be of one length in PostgreSQL.
	add("altered", "text")
	for _, f := range bigintColumns {
		add(column(f), "bigint")
	}
	add("retry_after", "interval")
	return "INSERT INTO agentsafe.audit_events (" + cols + ")\nSELECT " + sel + "\nFROM unnest(" + from +
		") WITH ORDINALITY AS r(" + names + ", n)\nORDER BY r.n"
}()

// Execer runs a statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Insert writes sealed records in one statement.
func Insert(ctx context.Context, db Execer, sealed []auditchain.Sealed) error {
	n := len(sealed)
	texts := make([][]pgtype.Text, len(textColumns))
	for i := range texts {
		texts[i] = make([]pgtype.Text, n)
	}
	var (
		ats                  = make([]time.Time, n)
		attempt, attempts    = make([]pgtype.Int4, n), make([]pgtype.Int4, n)
		retryable, succeeded = make([]pgtype.Bool, n), make([]pgtype.Bool, n)
		durations            = make([]pgtype.Interval, n)
		seqs                 = make([]int64, n)
		prevs, hashes        = make([]string, n), make([]string, n)
		sigs                 = make([][]byte, n)
		altered              = make([]pgtype.Text, n)
		bigints              = make([][]pgtype.Int8, len(bigintColumns))
		retryAfters          = make([]pgtype.Interval, n)
	)
	for i := range bigints {
		bigints[i] = make([]pgtype.Int8, n)
	}
	for i := range sealed {
		r := sealed[i].Record
		for c, f := range textColumns {
			texts[c][i] = pgtype.Text{String: r.String(f), Valid: r.Has(f)}
		}
		ats[i] = r.TimeValue()
		attempt[i] = pgtype.Int4{Int32: int32(r.Int(auditchain.Attempt)), Valid: r.Has(auditchain.Attempt)}
		attempts[i] = pgtype.Int4{Int32: int32(r.Int(auditchain.Attempts)), Valid: r.Has(auditchain.Attempts)}
		retryable[i] = pgtype.Bool{Bool: r.Bool(auditchain.Retryable), Valid: r.Has(auditchain.Retryable)}
		succeeded[i] = pgtype.Bool{Bool: r.Bool(auditchain.Succeeded), Valid: r.Has(auditchain.Succeeded)}
		durations[i] = pgtype.Interval{Microseconds: r.Int(auditchain.DurationUS), Valid: r.Has(auditchain.DurationUS)}
		seqs[i] = r.Int(auditchain.ChainSeq)
		prevs[i] = r.PrevValue().String()
		hashes[i] = sealed[i].Hash.String()
		sigs[i] = sealed[i].Signature
		if r.Has(auditchain.Altered) {
			altered[i] = pgtype.Text{String: strings.Join(r.Strings(auditchain.Altered), ","), Valid: true}
		}
		for c, f := range bigintColumns {
			bigints[c][i] = pgtype.Int8{Int64: r.Int(f), Valid: r.Has(f)}
		}
		retryAfters[i] = pgtype.Interval{Microseconds: r.Int(auditchain.RetryAfterUS), Valid: r.Has(auditchain.RetryAfterUS)}
	}
	args := make([]any, 0, len(textColumns)+len(bigintColumns)+12)
	for _, t := range texts {
		args = append(args, t)
	}
	args = append(args, ats, attempt, attempts, retryable, succeeded, durations, seqs, prevs, hashes, sigs, altered)
	for _, b := range bigints {
		args = append(args, b)
	}
	args = append(args, retryAfters)
	_, err := db.Exec(ctx, insertSQL, args...)
	return err
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Head reads the last record of chain: its chain_seq and hash (0 and the
// zero hash when the chain has none).
func Head(ctx context.Context, db Querier, chain string) (uint64, auditchain.Hash, error) {
	var seq int64
	var h string
	err := db.QueryRow(ctx, `SELECT chain_seq, hash FROM agentsafe.audit_events WHERE chain = $1 ORDER BY chain_seq DESC LIMIT 1`, chain).Scan(&seq, &h)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, auditchain.Hash{}, nil
	}
	if err != nil {
		return 0, auditchain.Hash{}, err
	}
	hash, ok := auditchain.ParseHash(h)
	if !ok || seq <= 0 {
		return 0, auditchain.Hash{}, fmt.Errorf("the head of chain %s is malformed (chain_seq %d, hash %q)", chain, seq, h)
	}
	return uint64(seq), hash, nil
}

// IsChainConflict reports whether err is a unique violation of a chain
// place: the write (or an earlier one whose reply was lost) found its
// chain_seq taken.
func IsChainConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "audit_events_chain"
}

// IsServerError reports whether err is an error the server answered
// with: the statement failed, and nothing of it was committed. Any other
// error (a connection lost, a timeout) leaves the commit in doubt.
func IsServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
