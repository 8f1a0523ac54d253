package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
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
// procedure; a procedure's changes in the order of its fields.
func compare(old, cur registryJSON) ([]change, error) {
	var out []change
	report := func(c class, proc, format string, args ...any) {
		out = append(out, change{c, proc, fmt.Sprintf(format, args...)})
	}
	if err := walk(inventoryFields, inventoryRules, reflect.ValueOf(old), reflect.ValueOf(cur), report); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b change) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.procedure, b.procedure))
	})
	return out, nil
}

// walk applies each field's rule to its old and new value; a field
// without a rule is unranked. TestEveryInventoryFieldHasARule keeps that
// fallback for a build whose tests did not run.
func walk[A any](fields []field, rules map[string]rule[A], old, cur reflect.Value, add A) error {
	for _, f := range fields {
		r, ok := rules[f.path]
		if !ok {
			r = unranked[A](f.path)
		}
		if err := r(old.FieldByIndex(f.index).Interface(), cur.FieldByIndex(f.index).Interface(), add); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
	}
	return nil
}

// The drift gate's rules: one per field of the inventory, keyed by its
// JSON path, as SPEC §12 "Inventory and drift gate" lists them. Widening
// is anything that lets a call run more often, with less review, for
// longer, on more surfaces, do more, or look safer to an agent's client;
// narrowing is the reverse; neutral changes nothing agents can reach; a
// change that cannot be ranked is widening.
//
// To add a field to the inventory: add it to middleware's snapshot (it
// writes the file), to registryJSON or capabilityJSON here (which read it
// and are tied to the former by the golden tests), and one entry to
// inventoryRules or capabilityRules below, keyed by its JSON path
// (nested objects as "retry.backoff"; a list is one field, ranked as a
// whole); then a case in TestCheckClassifiesEveryChange that changes it.
// TestEveryInventoryFieldHasARule fails until the entry exists, and
// TestCheckClassifiesEveryChange until a case changes the field. The
// helpers cover the usual shapes: toggle (a bool), durationRule, countRule,
// changeWidens and neutralText (strings); a list or an ordering of its own
// takes a function of the field's type through typed. For example, a bool
// that widens when turned on is
//
//	"inline": toggle(widening, narrowing, "inline turned on", "inline turned off"),
//
// one that widens when turned off is toggle(narrowing, widening, ...), and
// a list is typed(compareBudgets) with compareBudgets(b, c []budgetJSON,
// add adder) error.
var (
	inventoryRules = map[string]rule[reporter]{
		"version":      typed(sameVersion),
		"policies":     typed(comparePolicies),
		"capabilities": typed(compareCapabilities),
	}
	capabilityRules = map[string]rule[adder]{
		// The key: capabilities are matched by procedure, so a renamed one
		// is a removal and an addition (compareCapabilities).
		"procedure":  typed(func(b, c string, _ adder) error { return nil }),
		"sideEffect": typed(compareSideEffect),
		"risk":       typed(compareRisk),
		// Turned on, agents' clients may repeat the call (idempotentHint),
		// and a write may be retried.
		"idempotent": toggle(widening, narrowing, "idempotent turned on", "idempotent turned off"),
		// Unranked both ways: a stream is governed per stream, not per
		// message (no approval, no dedup), and a unary call of a method
		// that streamed takes other input.
		"streaming": toggle(widening, widening, "streaming turned on", "streaming turned off"),
		// Turned on, a handler that ignores its context holds its caller
		// past the deadline: bounded reporting rests on the handler.
		"inline":             toggle(widening, narrowing, "inline turned on", "inline turned off"),
		"timeout":            durationRule("timeout", widening),
		"retry.maxRetries":   countRule("retries", widening),
		"retry.backoff":      durationRule("retry backoff", narrowing),
		"approval.required":  toggle(narrowing, widening, "approval now required", "approval no longer required"),
		"approval.type":      changeWidens("approval type"), // whose approval is asked for: cannot be ranked
		"approval.quorum":    countRule("approval quorum", narrowing),
		"approval.expiresIn": durationRule("approval expiry", widening),
		"exposure":           typed(compareExposure),
		"dedup":              typed(compareDedup),
		"budgets":            typed(compareBudgets),
		// Removed, an approval is no longer bound to the state its
		// approver saw: it runs however the state changed since.
		"preview":     toggle(narrowing, widening, "preview added", "preview removed"),
		"toolName":    neutralText("tool name"),
		"description": neutralText("description"),
	}
)

// inventoryFields and capabilityFields are the fields the rules rank.
var (
	inventoryFields  = fieldsOf(reflect.TypeFor[registryJSON]())
	capabilityFields = fieldsOf(reflect.TypeFor[capabilityJSON]())
)

// field is one field of the inventory: its JSON path and its index in the
// Go type that reads it.
type field struct {
	path  string
	index []int
}

// fieldsOf lists every field of t in order, walking nested structs (JSON
// objects) to their leaves; a slice is one field.
func fieldsOf(t reflect.Type) []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			index := append(index[:len(index):len(index)], i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, prefix+name+".", index)
				continue
			}
			out = append(out, field{prefix + name, index})
		}
	}
	walk(t, "", nil)
	return out
}

// A rule classifies the change of one field, given its old and new value;
// A is how it reports: a reporter for the inventory's own fields, an
// adder, bound to the procedure, for a capability's.
type rule[A any] func(old, cur any, add A) error

type (
	reporter func(c class, procedure, format string, args ...any)
	adder    func(c class, format string, args ...any)
)

// typed makes a rule of a function of the field's own type.
func typed[T, A any](f func(old, cur T, add A) error) rule[A] {
	return func(old, cur any, add A) error { return f(old.(T), cur.(T), add) }
}

// unranked is the rule of a field that has none: any change widens.
func unranked[A any](path string) rule[A] {
	return func(old, cur any, add A) error {
		if reflect.DeepEqual(old, cur) {
			return nil
		}
		what := fmt.Sprintf("%s %v → %v: no rule ranks this change", path, old, cur)
		switch add := any(add).(type) {
		case reporter:
			add(widening, "-", "%s", what)
		case adder:
			add(widening, "%s", what)
		}
		return nil
	}
}

func sameVersion(b, c int, _ reporter) error {
	if b != c {
		return fmt.Errorf("version %d → %d: compare inventories of one version", b, c)
	}
	return nil
}

// comparePolicies: a removed policy widens and an added one narrows. Their
// order changes nothing a call can do (they compose by precedence).
func comparePolicies(b, c []string, report reporter) error {
	for _, p := range b {
		if !slices.Contains(c, p) {
			report(widening, "-", "policy %q removed", p)
		}
	}
	for _, p := range c {
		if !slices.Contains(b, p) {
			report(narrowing, "-", "policy %q added", p)
		}
	}
	if !slices.Equal(b, c) && slices.Equal(slices.Sorted(slices.Values(b)), slices.Sorted(slices.Values(c))) {
		report(neutral, "-", "policies reordered: %v → %v", b, c)
	}
	return nil
}

// compareCapabilities classifies added and removed capabilities, and
// every field of those both list.
func compareCapabilities(old, cur []capabilityJSON, report reporter) error {
	before := map[string]capabilityJSON{}
	for _, c := range old {
		before[c.Procedure] = c
	}
	after := map[string]bool{}
	for _, c := range cur {
		after[c.Procedure] = true
		b, ok := before[c.Procedure]
		switch {
		case !ok && (writeLike(c.SideEffect) || slices.Contains(c.Exposure, "mcp")):
			report(widening, c.Procedure, "new %s capability, exposed on %v", c.SideEffect, c.Exposure)
		case !ok: // a read (or none) on rpc/http only
			report(neutral, c.Procedure, "new %s capability, exposed on %v", c.SideEffect, c.Exposure)
		default:
			add := func(cl class, format string, args ...any) { report(cl, c.Procedure, format, args...) }
			if err := walk(capabilityFields, capabilityRules, reflect.ValueOf(b), reflect.ValueOf(c), adder(add)); err != nil {
				return fmt.Errorf("%s: %w", c.Procedure, err)
			}
		}
	}
	// The inventory cannot tell a deleted method from one whose
	// declaration was dropped, which still runs, ungoverned: with no
	// approval, policy, timeout or event. That widens what needed review
	// or writes; a read or none without approval is as little watched as
	// a new one on rpc/http.
	for _, c := range old {
		switch {
		case after[c.Procedure]:
		case c.Approval.Required:
			report(widening, c.Procedure, "capability removed, and its approval with it: if the method is still served, it runs ungoverned")
		case writeLike(c.SideEffect):
			report(widening, c.Procedure, "write-like capability removed: if the method is still served, it runs ungoverned")
		default:
			report(narrowing, c.Procedure, "capability removed")
		}
	}
	return nil
}

// compareSideEffect: any change widens. Up, the procedure does more; down,
// it looks safer to an agent's client (MCP's readOnlyHint,
// destructiveHint and openWorldHint follow it) and loses the handling a
// write-like capability gets, from side-effect policies on.
func compareSideEffect(b, c string, add adder) error {
	switch {
	case b == c:
	case writeLike(c) && !writeLike(b):
		add(widening, "side effect %s → %s: now write-like", b, c)
	case writeLike(b) && !writeLike(c):
		add(widening, "side effect %s → %s: looks read-only to agents' clients and loses write-like handling", b, c)
	default:
		add(widening, "side effect %s → %s", b, c)
	}
	return nil
}

// compareRisk: a lower risk widens (it looks safer to approvers, policies
// and agents), a higher one narrows.
func compareRisk(b, c string, add adder) error {
	levels := []string{"low", "medium", "high", "critical"}
	bi, ci := slices.Index(levels, b), slices.Index(levels, c)
	if bi < 0 || ci < 0 {
		return fmt.Errorf("risk %q → %q: want low, medium, high or critical", b, c)
	}
	switch {
	case ci < bi:
		add(widening, "risk %s → %s", b, c)
	case ci > bi:
		add(narrowing, "risk %s → %s", b, c)
	}
	return nil
}

// compareExposure: a new surface widens, a dropped one narrows.
func compareExposure(b, c []string, add adder) error {
	for _, s := range c {
		if !slices.Contains(b, s) {
			add(widening, "exposed on %s", s)
		}
	}
	for _, s := range b {
		if !slices.Contains(c, s) {
			add(narrowing, "no longer exposed on %s", s)
		}
	}
	return nil
}

// compareDedup: a window shortened or turned off (0) widens, since repeats
// it replayed run again; one turned on or made longer narrows.
func compareDedup(b, c string, add adder) error {
	bd, cd, err := durations(b, c)
	if err != nil {
		return err
	}
	show := func(d time.Duration) string {
		if d == 0 {
			return "off"
		}
		return d.String()
	}
	switch {
	case cd == bd:
	case bd == 0 || (cd != 0 && cd > bd):
		add(narrowing, "dedup window %s → %s", show(bd), show(cd))
	default:
		add(widening, "dedup window %s → %s", show(bd), show(cd))
	}
	return nil
}

// compareBudgets, by budget name: a budget removed, raised, keyed finer
// (audience → tenant → person → actor: each key gets the whole limit) or
// given a shorter window widens, and the reverse narrows; an amount that
// reads another field cannot be ranked (widens); a deny budget that now
// escalates to an approval widens (an over-the-limit call may run), the
// reverse narrows.
func compareBudgets(b, c []budgetJSON, add adder) error {
	pers := []string{"audience", "tenant", "person", "actor"} // coarse to fine
	before := map[string]budgetJSON{}
	for _, x := range b {
		before[x.Name] = x
	}
	after := map[string]bool{}
	for _, y := range c {
		after[y.Name] = true
		x, ok := before[y.Name]
		if !ok {
			add(narrowing, "budget %q added: %d per %s over %s", y.Name, y.Limit, y.Per, y.Window)
			continue
		}
		label := fmt.Sprintf("budget %q", y.Name)
		ranked(label+" limit", widening, x.Limit, y.Limit, add)
		bw, cw, err := durations(x.Window, y.Window)
		if err != nil {
			return err
		}
		ranked(label+" window", narrowing, bw, cw, add)
		bp, cp := slices.Index(pers, x.Per), slices.Index(pers, y.Per)
		if bp < 0 || cp < 0 {
			return fmt.Errorf("budget %q per %q → %q: want actor, person, tenant or audience", y.Name, x.Per, y.Per)
		}
		switch {
		case cp > bp:
			add(widening, "%s keyed finer, per %s → per %s: each key gets the whole limit", label, x.Per, y.Per)
		case cp < bp:
			add(narrowing, "%s keyed coarser, per %s → per %s", label, x.Per, y.Per)
		}
		if x.Amount != y.Amount {
			add(widening, "%s amount %q → %q: what a call spends is read elsewhere, which cannot be ranked", label, x.Amount, y.Amount)
		}
		switch {
		case x.Over == y.Over:
		case y.Over == "require_approval":
			add(widening, "%s over its limit %s → %s: a call past it may now run", label, x.Over, y.Over)
		default:
			add(narrowing, "%s over its limit %s → %s", label, x.Over, y.Over)
		}
	}
	for _, x := range b {
		if !after[x.Name] {
			add(widening, "budget %q removed", x.Name)
		}
	}
	return nil
}

// toggle is the rule of a bool: turning it on is class on, off is class
// off.
func toggle(on, off class, onWhat, offWhat string) rule[adder] {
	return typed(func(b, c bool, add adder) error {
		switch {
		case c && !b:
			add(on, "%s", onWhat)
		case b && !c:
			add(off, "%s", offWhat)
		}
		return nil
	})
}

// durationRule is the rule of a duration: growing is class longer,
// shrinking its reverse.
func durationRule(label string, longer class) rule[adder] {
	return typed(func(b, c string, add adder) error {
		bd, cd, err := durations(b, c)
		if err == nil {
			ranked(label, longer, bd, cd, add)
		}
		return err
	})
}

// countRule is the rule of a count: growing is class more, shrinking its
// reverse.
func countRule(label string, more class) rule[adder] {
	return typed(func(b, c int, add adder) error {
		ranked(label, more, b, c, add)
		return nil
	})
}

// ranked reports a value that grew as class more, one that shrank as its
// reverse.
func ranked[T cmp.Ordered](label string, more class, b, c T, add adder) {
	switch cmp.Compare(c, b) {
	case 1:
		add(more, "%s %v → %v", label, b, c)
	case -1:
		add(reverse(more), "%s %v → %v", label, b, c)
	}
}

// changeWidens is the rule of a string whose changes cannot be ranked.
func changeWidens(label string) rule[adder] { return text(label, widening) }

// neutralText is the rule of a string for people, such as a description.
func neutralText(label string) rule[adder] { return text(label, neutral) }

func text(label string, cl class) rule[adder] {
	return typed(func(b, c string, add adder) error {
		if b != c {
			add(cl, "%s %q → %q", label, b, c)
		}
		return nil
	})
}

func reverse(c class) class {
	if c == widening {
		return narrowing
	}
	return widening
}

// durations parses an old and a new duration.
func durations(b, c string) (time.Duration, time.Duration, error) {
	bd, err := time.ParseDuration(b)
	if err != nil {
		return 0, 0, err
	}
	cd, err := time.ParseDuration(c)
	return bd, cd, err
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
