// Package benchfile reads go test -bench output into every run's metrics,
// by benchmark name, for the commands that turn a run into README figures.
package benchfile

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Runs holds, by benchmark name (without the -GOMAXPROCS suffix) and unit,
// the value of every run in file order.
type Runs map[string]map[string][]float64

var procs = regexp.MustCompile(`-\d+$`)

// Read parses the benchmark lines of the file at path.
func Read(path string) (Runs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runs := Runs{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := procs.ReplaceAllString(fields[0], "")
		if runs[name] == nil {
			runs[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", fields[0], fields[i], err)
			}
			runs[name][fields[i+1]] = append(runs[name][fields[i+1]], v)
		}
	}
	return runs, sc.Err()
}

// Median is the median of the runs of name in unit, and how many runs
// there were; 0, 0 when there were none.
func (r Runs) Median(name, unit string) (float64, int) {
	xs := r[name][unit]
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2], len(s)
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, len(s)
}
