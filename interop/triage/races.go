package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// races are the known races of known-races.txt: for each case name, the
// one failure message a run may show for it. A case is a known race only
// if both match, so the same case failing another way still fails.
type races map[string]string

// parseRaces reads known-races.txt: "message: M" sets the message of the
// case names on the lines after it, one full case name a line (no
// patterns); "#" starts a comment line. Every problem is reported, with
// its line number.
func parseRaces(r io.Reader) (races, error) {
	out := make(races)
	var errs []error
	message := ""
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "message:"):
			message = strings.TrimSpace(strings.TrimPrefix(l, "message:"))
			if message == "" {
				errs = append(errs, fmt.Errorf("line %d: empty message", n))
			}
		case message == "":
			errs = append(errs, fmt.Errorf("line %d: case %q comes before any \"message:\" line", n, l))
		case strings.Contains(l, "*"):
			errs = append(errs, fmt.Errorf("line %d: %q is a pattern; list each case by its full name", n, l))
		default:
			if _, dup := out[l]; dup {
				errs = append(errs, fmt.Errorf("line %d: case %q is listed twice", n, l))
			}
			out[l] = message
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func parseRacesFile(path string) (races, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := parseRaces(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// match reports whether f is a known race: its case is listed, and what
// the runner printed about it is that case's message and nothing else.
func (rs races) match(f failure) bool {
	message, ok := rs[f.name]
	if !ok || f.known {
		return false
	}
	lines := slices.DeleteFunc(slices.Clone(f.lines), func(l string) bool { return strings.TrimSpace(l) == "" })
	return len(lines) == 1 && strings.TrimSpace(lines[0]) == message
}

// split separates the known races among failing from the other failures.
func (rs races) split(failing []failure) (known, other []failure) {
	for _, f := range failing {
		if rs.match(f) {
			known = append(known, f)
		} else {
			other = append(other, f)
		}
	}
	return known, other
}

// check reports whether a failed run failed only by known races, writing
// what it found to w. The runner's own "failed as expected" cases do not
// count: the runner has already held them to known-failing.txt.
func check(w io.Writer, rs races, failing []failure) bool {
	failing = slices.DeleteFunc(slices.Clone(failing), func(f failure) bool { return f.known })
	known, other := rs.split(failing)
	for _, f := range known {
		fmt.Fprintf(w, "  known race (known-races.txt), not a failure: %s: %s\n", f.name, rs[f.name])
	}
	switch {
	case len(other) > 0:
		fmt.Fprintf(w, "  %d failing case(s) not on known-races.txt with their message\n", len(other))
		return false
	case len(known) == 0:
		fmt.Fprintln(w, "  the runner failed, but no case did: see its log")
		return false
	}
	return true
}
