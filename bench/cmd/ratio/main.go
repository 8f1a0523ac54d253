// Command ratio prints, as a Markdown table row, the ratio of two
// benchmarks' medians within one go test -bench output: the figure and
// its goal as README.md quotes them.
//
//	go run ./cmd/ratio FILE UNIT NUMERATOR DENOMINATOR LABEL GOAL
//
// NUMERATOR and DENOMINATOR are full benchmark names without the
// -GOMAXPROCS suffix, e.g. BenchmarkGoverned/impl=agentsafe. GOAL is like
// "<=1.1" or ">=0.8" or "-" for none.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentsafe/agentsafe/bench/internal/benchfile"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: ratio FILE UNIT NUMERATOR DENOMINATOR LABEL GOAL")
		os.Exit(2)
	}
	file, unit, num, den, label, goal := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	runs, err := benchfile.Read(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	n, nn := runs.Median(num, unit)
	d, dn := runs.Median(den, unit)
	if nn == 0 || dn == 0 || d == 0 {
		fmt.Fprintf(os.Stderr, "ratio: no runs of %s or %s in %s\n", num, den, unit)
		os.Exit(1)
	}
	r := n / d
	fmt.Printf("| %s | %s / %s | **%.2f** | %s | %s |\n", label, short(n, unit), short(d, unit), r, goal, verdict(r, goal))
}

func short(v float64, unit string) string {
	if unit == "ns/op" || unit == "cpu-ns/op" {
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2f ms", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.2f µs", v/1e3)
		}
		return fmt.Sprintf("%.0f ns", v)
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}

func verdict(r float64, goal string) string {
	var ok bool
	switch {
	case strings.HasPrefix(goal, "<="):
		g, err := strconv.ParseFloat(goal[2:], 64)
		ok = err == nil && r <= g
	case strings.HasPrefix(goal, ">="):
		g, err := strconv.ParseFloat(goal[2:], 64)
		ok = err == nil && r >= g
	default:
		return "—"
	}
	if ok {
		return "met"
	}
	return "**missed**"
}
