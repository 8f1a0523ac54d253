// Command loadplot reads the output of BenchmarkConnectLoad (go test
// -bench ConnectLoad -count N) and draws the load curve: p50 and p99
// latency of Connect unary calls over loopback, bare and governed, against
// the number of concurrent callers. It writes the plot as SVG and prints
// the table, each figure the median of the runs, with the ratios.
//
//	go run ./cmd/loadplot load.txt load.svg
package main

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"

	"github.com/agentsafe/agentsafe/bench/internal/benchfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var name = regexp.MustCompile(`^BenchmarkConnectLoad/c=(\d+)/server=(\w+)$`)

type key struct {
	c      int
	server string
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: loadplot BENCH-OUTPUT OUT.svg")
		os.Exit(2)
	}
	all, err := benchfile.Read(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runs := map[key]map[string][]float64{}
	var cs []int
	for n, metrics := range all {
		m := name.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		c, _ := strconv.Atoi(m[1])
		runs[key{c, m[2]}] = metrics
		if !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	if len(cs) == 0 {
		fmt.Fprintln(os.Stderr, "no BenchmarkConnectLoad lines")
		os.Exit(1)
	}
	table(cs, runs)
	if err := draw(cs, runs, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func table(cs []int, runs map[key]map[string][]float64) {
	fmt.Println("| callers | runs | p50 bare | p50 governed | ratio | p99 bare | p99 governed | ratio | time/call ratio | allocs bare → governed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range cs {
		b, g := runs[key{c, "bare"}], runs[key{c, "agentsafe"}]
		m := func(r map[string][]float64, unit string) float64 { return median(r[unit]) }
		fmt.Printf("| %d | %d | %.0f µs | %.0f µs | **%.2f** | %.0f µs | %.0f µs | **%.2f** | %.2f | %.0f → %.0f |\n",
			c, min(len(b["p50-µs"]), len(g["p50-µs"])),
			m(b, "p50-µs"), m(g, "p50-µs"), m(g, "p50-µs")/m(b, "p50-µs"),
			m(b, "p99-µs"), m(g, "p99-µs"), m(g, "p99-µs")/m(b, "p99-µs"),
			m(g, "ns/op")/m(b, "ns/op"), m(b, "allocs/op"), m(g, "allocs/op"))
	}
}

func draw(cs []int, runs map[key]map[string][]float64, out string) error {
	p := plot.New()
	p.Title.Text = "Connect unary over loopback: latency vs concurrent callers"
	p.X.Label.Text = "concurrent callers"
	p.Y.Label.Text = "latency (µs)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var ticks []plot.Tick
	for _, c := range cs {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var lines []any
	for _, s := range []struct{ server, unit, label string }{
		{"bare", "p50-µs", "bare p50"}, {"agentsafe", "p50-µs", "governed p50"},
		{"bare", "p99-µs", "bare p99"}, {"agentsafe", "p99-µs", "governed p99"},
	} {
		var xy plotter.XYs
		for _, c := range cs {
			if v := median(runs[key{c, s.server}][s.unit]); v > 0 {
				xy = append(xy, plotter.XY{X: float64(c), Y: v})
			}
		}
		slices.SortFunc(xy, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		lines = append(lines, s.label, xy)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, out)
}

func median(xs []float64) float64 {
	v, _ := benchfile.Runs{"": {"": xs}}.Median("", "")
	return v
}
