// Command agentsafe writes the inventory of what agentsafe governs, and
// compares two inventories, so that a CI job fails when a change widens
// what agents can reach; and it verifies a tamper-evident audit trail.
//
//	agentsafe snapshot --descriptors set.binpb [--descriptors more.binpb] [--registry reg.json] > agentsafe.json
//	agentsafe check OLD NEW
//
// snapshot reads protobuf descriptor sets (buf build -o set.binpb, or
// protoc --include_imports --descriptor_set_out=set.binpb), takes the
// capabilities their agentsafe.v1.capability method options declare, and
// merges the registry file's entries over them, as middleware.New does
// with a Go registry; it writes the same JSON inventory as
// Engine.WriteSnapshot. It never builds or runs the application's code.
//
// The registry file is JSON in the inventory's own form (an inventory is a
// valid registry file): {"policies": [names], "capabilities":
// [{"procedure": "/pkg.Service/Method" or a net/http route name,
// "sideEffect", "risk", "idempotent", "streaming", "inline", "timeout",
// "retry": {"maxRetries", "backoff"}, "approval": {"required", "type",
// "quorum", "expiresIn"}, "exposure", "dedup", "budgets": [{"name",
// "limit", "window", "per", "amount", "over"}], "toolName",
// "description"}]}. Only
// "procedure" and "sideEffect" are required; durations are Go durations.
// "policies" names the policies the application installs with
// middleware.WithPolicy (and "approval-condition" for
// WithApprovalCondition), which the command cannot see in code.
//
// check reads two inventories, validates each as middleware.New validates
// a registry (fields left out take their defaults), and classifies every
// difference, field by field (one rule per field of the inventory):
//
//   - widening, anything that lets a call run more often, with less
//     review, for longer, on more surfaces, do more, or look safer to an
//     agent's client: a new write-like capability, or a new one exposed
//     on mcp; any change of side effect (up, the procedure does more;
//     down, it looks safer to agents' clients and loses write-like
//     handling); idempotent turned on; a lower risk; a removed approval, a
//     lower quorum, a changed approval type, a longer approval expiry; an
//     added or larger retry, a shorter backoff; a longer timeout; inline
//     turned on (the handler, not the engine, then bounds how long a call
//     is held); a new exposure; a dedup window shortened or turned off; a removed policy;
//     a budget removed, raised, keyed finer (audience → tenant → person →
//     actor: each key gets the whole limit), given a shorter window,
//     escalating to an approval where it denied, or reading its amount
//     from another field (it cannot be ranked);
//     streaming turned on or off (it cannot be ranked); a removed
//     capability that was write-like or required approval (the inventory
//     cannot tell a deleted method from one whose declaration was
//     dropped, which runs ungoverned);
//   - narrowing: the reverse of those, and a removed read (or none)
//     without approval;
//   - neutral: a description or tool name edited, a new read (or none)
//     exposed on rpc or http only, the policies reordered (they compose
//     by precedence).
//
// A field no rule ranks would be widening; a test keeps every field ruled.
//
// It prints a table, one change per line, and exits 0 when nothing
// widens, 1 when something does, and 2 for a usage or input error (an
// unreadable or malformed file, an invalid capability).
//
// audit verify checks a hash-chained audit trail (package auditlog's JSON
// Lines, or agentsafepg's table; the chains are described in package
// auditlog):
//
//	agentsafe audit verify --file trail.jsonl [--pubkey key.pem]... [--checkpoint kept.jsonl]...
//	agentsafe audit verify --postgres URL [--pubkey key.pem]... [--checkpoint kept.jsonl]...
//
// It recomputes every chain and prints, per chain, the first record of
// each kind of finding: modified (its content does not give its hash),
// rewritten (a change with the later hashes recomputed, caught by a link
// to an original hash or a kept checkpoint), deleted (a gap in chain_seq),
// inserted (a second record with one chain_seq, or a record with no
// chain), reordered (stored against the order it was written in), cut (the
// chain ends before a kept checkpoint), and bad signature; then the part
// of the chain a valid checkpoint covers (attested) and the rest
// (unattested, never reported as verified). A checkpoint is valid when its
// Ed25519 signature verifies under a --pubkey (PEM, PKIX) or when it
// matches a kept one (--checkpoint: JSON Lines, auditlog.Checkpoint's
// JSON form). With --postgres it also reports every decided, consumed or
// outcome-recorded approval and every stored result whose records are in
// no valid chain. It exits 0 when it found nothing, 1 when it found
// tampering, and 2 for a usage or input error (a missing file, an
// unreadable record).
package main

import (
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The exit codes.
const (
	exitOK       = 0
	exitWidening = 1
	exitUsage    = 2
)

const usage = `usage:
  agentsafe snapshot --descriptors set.binpb [--descriptors more.binpb] [--registry reg.json]
  agentsafe check OLD NEW
  agentsafe audit verify --file TRAIL.jsonl | --postgres URL [--pubkey KEY.pem] [--checkpoint KEPT.jsonl]

snapshot writes the JSON inventory of the capabilities the descriptor sets
and the registry file declare; check compares two inventories and exits 1
when the second widens what agents can reach, 2 on a usage or input error;
audit verify checks an audit trail's hash chains and exits 1 when it was
tampered with (agentsafe audit verify -h for more).
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "snapshot":
		return snapshotCommand(args[1:], stdout, stderr)
	case "check":
		return checkCommand(args[1:], stdout, stderr)
	case "audit":
		return auditCommand(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "agentsafe: unknown command %q\n%s", args[0], usage)
	return exitUsage
}
