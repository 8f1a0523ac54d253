package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// class is how a change moves what agents can reach.
type class int

const (
	widening class = iota
	narrowing
	neutral
)

func (c class) String() string { return [...]string{"widening", "narrowing", "neutral"}[c] }

// change is one difference between two inventories.
type change struct {
	class     class
	procedure string // "-" for the engine's policies
	what      string
}

func checkCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprint(stderr, "agentsafe check: want two inventories, OLD and NEW\n"+usage)
		return exitUsage
	}
	old, err := readInventory(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "agentsafe check: %v\n", err)
		return exitUsage
	}
	cur, err := readInventory(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "agentsafe check: %v\n", err)
		return exitUsage
	}
	changes, err := compare(old, cur)
	if err != nil {
		fmt.Fprintf(stderr, "agentsafe check: %v\n", err)
		return exitUsage
	}
	printChanges(stdout, changes)
	if len(changes) > 0 && changes[0].class == widening {
		return exitWidening
	}
	return exitOK
}

// readInventory reads an inventory as WriteSnapshot (or the snapshot
// command) writes it.
func readInventory(path string) (registryJSON, error) {
	var inv registryJSON
	if err := decodeFile(path, &inv); err != nil {
		return inv, err
	}
	if inv.Version != 1 {
		return inv, fmt.Errorf("%s: inventory version %d; this command reads version 1", path, inv.Version)
	}
	seen := map[string]bool{}
	for _, c := range inv.Capabilities {
		if c.Procedure == "" || seen[c.Procedure] {
			return inv, fmt.Errorf("%s: procedure %q is empty or listed twice", path, c.Procedure)
		}
		seen[c.Procedure] = true
	}
	return normalized(path, inv)
}

// normalized validates an inventory as middleware.New validates the
// capabilities it lists (a misspelt side effect or surface must fail the
// gate, not pass as a harmless change) and returns it as an engine built
// from it writes it, defaults resolved, so that a hand-edited file
// compares like a written one.
func normalized(path string, inv registryJSON) (registryJSON, error) {
	reg, err := inv.registry(path)
	if err != nil {
		return inv, err
	}
	eng, err := newEngine(nil, reg, inv.Policies)
	if err != nil {
		return inv, fmt.Errorf("%s: %w", path, err)
	}
	var b bytes.Buffer
	if err := eng.WriteSnapshot(&b); err != nil {
		return inv, err
	}
	var out registryJSON
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		return inv, err
	}
	return out, nil
}

// compare lists every change from old to cur, widening first, then by
// procedure.
func compare(old, cur registryJSON) ([]change, error) {
	var out []change
	add := func(c class, proc, format string, args ...any) {
		out = append(out, change{c, proc, fmt.Sprintf(format, args...)})
	}
	for _, p := range old.Policies {
		if !slices.Contains(cur.Policies, p) {
			add(widening, "-", "policy %q removed", p)
		}
	}
	for _, p := range cur.Policies {
		if !slices.Contains(old.Policies, p) {
			add(narrowing, "-", "policy %q added", p)
		}
	}
	before := map[string]capabilityJSON{}
	for _, c := range old.Capabilities {
		before[c.Procedure] = c
	}
	after := map[string]capabilityJSON{}
	for _, c := range cur.Capabilities {
		after[c.Procedure] = c
		b, ok := before[c.Procedure]
		switch {
		case !ok && writeLike(c.SideEffect):
			add(widening, c.Procedure, "new %s capability, exposed on %v", c.SideEffect, c.Exposure)
		case !ok:
			add(neutral, c.Procedure, "new %s capability, exposed on %v", c.SideEffect, c.Exposure)
		default:
			if err := compareCapability(b, c, func(cl class, format string, args ...any) { add(cl, c.Procedure, format, args...) }); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Procedure, err)
			}
		}
	}
	for _, c := range old.Capabilities {
		switch _, ok := after[c.Procedure]; {
		case ok:
		case c.Approval.Required:
			// The inventory cannot tell a deleted method from one whose
			// declaration was dropped; the latter runs unapproved.
			add(widening, c.Procedure, "capability removed, and its approval with it: if the method is still served, it runs ungoverned")
		default:
			add(narrowing, c.Procedure, "capability removed")
		}
	}
	slices.SortStableFunc(out, func(a, b change) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.procedure, b.procedure))
	})
	return out, nil
}

// compareCapability reports the changes of one capability.
func compareCapability(b, c capabilityJSON, add func(class, string, ...any)) error {
	switch {
	case b.SideEffect == c.SideEffect:
	case writeLike(c.SideEffect) && !writeLike(b.SideEffect):
		add(widening, "side effect %s → %s: now write-like", b.SideEffect, c.SideEffect)
	default:
		add(neutral, "side effect %s → %s", b.SideEffect, c.SideEffect)
	}
	if err := ordered("timeout", b.Timeout, c.Timeout, add); err != nil {
		return err
	}
	switch {
	case c.Retry.MaxRetries > b.Retry.MaxRetries:
		add(widening, "retries %d → %d", b.Retry.MaxRetries, c.Retry.MaxRetries)
	case c.Retry.MaxRetries < b.Retry.MaxRetries:
		add(narrowing, "retries %d → %d", b.Retry.MaxRetries, c.Retry.MaxRetries)
	}
	switch {
	case b.Approval.Required && !c.Approval.Required:
		add(widening, "approval no longer required")
	case !b.Approval.Required && c.Approval.Required:
		add(narrowing, "approval now required")
	}
	switch {
	case c.Approval.Quorum < b.Approval.Quorum:
		add(widening, "approval quorum %d → %d", b.Approval.Quorum, c.Approval.Quorum)
	case c.Approval.Quorum > b.Approval.Quorum:
		add(narrowing, "approval quorum %d → %d", b.Approval.Quorum, c.Approval.Quorum)
	}
	for _, s := range c.Exposure {
		if !slices.Contains(b.Exposure, s) {
			add(widening, "exposed on %s", s)
		}
	}
	for _, s := range b.Exposure {
		if !slices.Contains(c.Exposure, s) {
			add(narrowing, "no longer exposed on %s", s)
		}
	}
	for _, f := range []struct{ name, b, c string }{
		{"risk", b.Risk, c.Risk},
		{"idempotent", fmt.Sprint(b.Idempotent), fmt.Sprint(c.Idempotent)},
		{"streaming", fmt.Sprint(b.Streaming), fmt.Sprint(c.Streaming)},
		{"retry backoff", b.Retry.Backoff, c.Retry.Backoff},
		{"approval type", b.Approval.Type, c.Approval.Type},
		{"approval expiry", b.Approval.ExpiresIn, c.Approval.ExpiresIn},
		{"dedup window", b.Dedup, c.Dedup},
		{"tool name", b.ToolName, c.ToolName},
		{"description", b.Description, c.Description},
	} {
		if f.b != f.c {
			add(neutral, "%s %q → %q", f.name, f.b, f.c)
		}
	}
	return nil
}

// ordered classifies a duration that may only grow by widening.
func ordered(name, b, c string, add func(class, string, ...any)) error {
	bd, err := time.ParseDuration(b)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cd, err := time.ParseDuration(c)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case cd > bd:
		add(widening, "%s %s → %s", name, bd, cd)
	case cd < bd:
		add(narrowing, "%s %s → %s", name, bd, cd)
	}
	return nil
}

func writeLike(sideEffect string) bool {
	return sideEffect == "write" || sideEffect == "destructive" || sideEffect == "external"
}

// printChanges writes the table and a summary line.
func printChanges(w io.Writer, changes []change) {
	var n [3]int
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(changes) > 0 {
		fmt.Fprintln(tw, "CLASS\tPROCEDURE\tCHANGE")
	}
	for _, c := range changes {
		n[c.class]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.class, c.procedure, c.what)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d widening, %d narrowing, %d neutral\n", n[widening], n[narrowing], n[neutral])
}
