// Command testsummary reads `go test -json` on standard input and prints
// what a plain `go test` run hides: the output of every failing test, each
// package's result line, and at the end one line per package for every
// skipped test and every fallback a test took (an embedded Redis instead
// of redis-server, say), so a green run says what it did not test.
//
//	go test -race -json ./... | go run ./.ci/testsummary
//
// It exits 1 when a test or package failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// fallbackMarker starts the log line of a test that replaced something it
// needs with a stand-in (see internal/redistest).
const fallbackMarker = "agentsafe fallback:"

func main() {
	var (
		output  = map[string][]string{} // package/test → output so far
		notes   []string                // skips and fallbacks, in order
		seen    = map[string]bool{}
		failed  bool
		scanner = bufio.NewScanner(os.Stdin)
	)
	scanner.Buffer(make([]byte, 0, 1<<20), 16<<20)
	note := func(s string) {
		if !seen[s] {
			seen[s] = true
			notes = append(notes, s)
		}
	}
	for scanner.Scan() {
		var e event
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			fmt.Println(scanner.Text()) // not JSON: a build error, say
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "output":
			if i := strings.Index(e.Output, fallbackMarker); i >= 0 {
				note(fmt.Sprintf("%s: fallback: %s", e.Package, strings.TrimSpace(e.Output[i+len(fallbackMarker):])))
			}
			if e.Test == "" {
				if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "?") {
					fmt.Print(e.Output)
				} else {
					output[key] = append(output[key], e.Output)
				}
				continue
			}
			output[key] = append(output[key], e.Output)
		case "skip":
			if e.Test != "" {
				note(fmt.Sprintf("%s: skip: %s: %s", e.Package, e.Test, skipReason(output[key])))
			}
			delete(output, key)
		case "fail":
			failed = true
			for _, line := range output[key] {
				fmt.Print(line)
			}
			delete(output, key)
		case "pass":
			delete(output, key)
		}
	}
	if len(notes) > 0 {
		fmt.Printf("\n%d skipped tests and fallbacks (what this run did not test):\n", len(notes))
		slices.Sort(notes)
		for _, n := range notes {
			fmt.Println("  " + n)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// skipReason is the message a test gave t.Skip, from its output: the last
// line it logged, without the "file_test.go:12: " prefix.
func skipReason(lines []string) string {
	for _, l := range slices.Backward(lines) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if file, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(file, ".go:") {
			return msg
		}
		return l
	}
	return "(no reason given)"
}
