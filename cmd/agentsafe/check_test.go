package main

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// TestEveryInventoryFieldHasARule walks the inventory's type by
// reflection: a field added to it (as middleware.WriteSnapshot writes it,
// which the golden tests tie to registryJSON) fails here until the drift
// gate has a rule for it, and a rule whose field is gone fails too.
func TestEveryInventoryFieldHasARule(t *testing.T) {
	for _, table := range []struct {
		typ    reflect.Type
		prefix string
		rules  []string
	}{
		{reflect.TypeFor[registryJSON](), "", keys(inventoryRules)},
		{reflect.TypeFor[capabilityJSON](), "capabilities[].", keys(capabilityRules)},
	} {
		var paths []string
		for _, f := range fieldsOf(table.typ) {
			paths = append(paths, f.path)
			if !slices.Contains(table.rules, f.path) {
				t.Errorf("the inventory field %s%s has no drift rule: add one to the table in check.go", table.prefix, f.path)
			}
		}
		for _, r := range table.rules {
			if !slices.Contains(paths, r) {
				t.Errorf("the drift rule for %s%s names no field of the inventory", table.prefix, r)
			}
		}
	}
}

// TestAFieldWithoutARuleWidens: the table's fallback, for a build whose
// tests did not run, ranks any change of a field it lacks as widening.
func TestAFieldWithoutARuleWidens(t *testing.T) {
	b := capabilityJSON{Procedure: "p", Description: "old"}
	c := capabilityJSON{Procedure: "p", Description: "new"}
	var got []string
	add := func(cl class, format string, args ...any) {
		got = append(got, cl.String()+" "+fmt.Sprintf(format, args...))
	}
	if err := walk(capabilityFields, map[string]rule[adder]{}, reflect.ValueOf(b), reflect.ValueOf(c), adder(add)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"widening description old → new: no rule ranks this change"}; !slices.Equal(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
}

// TestFieldsOfWalksNestedObjects: every leaf, nested objects by their JSON
// path, a list as one field.
func TestFieldsOfWalksNestedObjects(t *testing.T) {
	type inner struct {
		B int    `json:"b"`
		C string `json:"c,omitempty"`
	}
	type outer struct {
		A     bool    `json:"a"`
		Inner inner   `json:"inner"`
		List  []inner `json:"list"`
		Plain string
	}
	var got []string
	for _, f := range fieldsOf(reflect.TypeFor[outer]()) {
		got = append(got, f.path)
	}
	if want := []string{"a", "inner.b", "inner.c", "list", "Plain"}; !slices.Equal(got, want) {
		t.Errorf("fields %q, want %q", got, want)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// inventoryFieldPaths lists every field of the inventory, a capability's
// as "capabilities[].path".
func inventoryFieldPaths() []string {
	var out []string
	for _, f := range fieldsOf(reflect.TypeFor[registryJSON]()) {
		out = append(out, f.path)
	}
	for _, f := range fieldsOf(reflect.TypeFor[capabilityJSON]()) {
		out = append(out, "capabilities[]."+f.path)
	}
	return out
}

// changedFields lists the fields that differ between two inventories, as
// inventoryFieldPaths names them: "capabilities" when a procedure was
// added or removed, a capability's field when it differs in a procedure
// both list.
func changedFields(old, cur registryJSON) []string {
	var out []string
	if !slices.Equal(old.Policies, cur.Policies) {
		out = append(out, "policies")
	}
	if old.Version != cur.Version {
		out = append(out, "version")
	}
	procedures := func(inv registryJSON) []string {
		var out []string
		for _, c := range inv.Capabilities {
			out = append(out, c.Procedure)
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(procedures(old), procedures(cur)) {
		out = append(out, "capabilities")
	}
	for _, b := range old.Capabilities {
		i := slices.IndexFunc(cur.Capabilities, func(c capabilityJSON) bool { return c.Procedure == b.Procedure })
		if i < 0 {
			continue
		}
		bv, cv := reflect.ValueOf(b), reflect.ValueOf(cur.Capabilities[i])
		for _, f := range fieldsOf(bv.Type()) {
			if !reflect.DeepEqual(bv.FieldByIndex(f.index).Interface(), cv.FieldByIndex(f.index).Interface()) {
				out = append(out, "capabilities[]."+f.path)
			}
		}
	}
	return out
}
