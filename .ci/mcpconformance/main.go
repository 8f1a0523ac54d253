// Command mcpconformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance) against the refund demo's /mcp and
// judges its results by scenarios.txt: it fails when a scenario that
// applies has a failed check, or when the suite runs a scenario the list
// does not classify (or no longer runs one it does). run.sh installs the
// suite and builds the demo, then runs this.
//
// The demo authenticates every request with a bearer token, and the
// suite sends none: a reverse proxy in front of it adds the demo agent's
// token and passes everything else through unchanged, the Host and Origin
// headers included, so that the DNS rebinding scenario meets the demo's
// own checks.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	node := flag.String("node", "node", "node (22 or later)")
	suite := flag.String("suite", "", "the suite's dist/index.js")
	demo := flag.String("demo", "", "the refund demo's binary")
	list := flag.String("list", "", "scenarios.txt")
	out := flag.String("out", "", "where the suite writes its results (emptied first)")
	flag.Parse()
	if *suite == "" || *demo == "" || *list == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(0)
	if err := run(*node, *suite, *demo, *list, *out); err != nil {
		log.Fatal("mcpconformance: ", err)
	}
}

// scenario is one line of scenarios.txt.
type scenario struct {
	name, class, why string
}

func run(node, suite, demo, listFile, out string) error {
	scenarios, err := readList(listFile)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	target, stop, err := startDemo(demo, filepath.Join(out, "demo.log"))
	if err != nil {
		return err
	}
	defer stop()
	proxy, err := startProxy(target, "agent-token")
	if err != nil {
		return err
	}
	defer proxy.Close()

	start := time.Now()
	cmd := exec.Command(node, suite, "server", "--url", "http://"+proxy.Addr().String()+"/mcp", "--suite", "all", "-o", filepath.Join(out, "results"))
	logFile, err := os.Create(filepath.Join(out, "suite.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The suite exits non-zero whenever any scenario fails, those that do
	// not apply included: its results, not its status, are judged.
	if err := cmd.Run(); err != nil && !errors.As(err, new(*exec.ExitError)) {
		return fmt.Errorf("running the suite: %w", err)
	}
	results, err := readResults(filepath.Join(out, "results"))
	if err != nil {
		return err
	}
	return judge(os.Stdout, scenarios, results, time.Since(start))
}

func readList(path string) ([]scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var list []scenario
	var problems []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 || !slices.Contains([]string{"applies", "fixture", "capability"}, parts[1]) || parts[2] == "" {
			problems = append(problems, fmt.Errorf("%s:%d: want scenario<TAB>applies|fixture|capability<TAB>why", path, n))
			continue
		}
		list = append(list, scenario{parts[0], parts[1], parts[2]})
	}
	return list, errors.Join(append(problems, sc.Err())...)
}

// startDemo starts the demo serving on a free loopback port, and returns
// its URL and a function that stops it.
func startDemo(bin, logPath string) (*url.URL, func(), error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "-serve", "-addr", "127.0.0.1:0")
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt) // the demo stops on Ctrl-C
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
	}
	serving := regexp.MustCompile(`Serving the order service on (http://\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if ok {
			parsed, err := url.Parse(u)
			if err == nil {
				return parsed, stop, nil
			}
		}
	case <-time.After(30 * time.Second):
	}
	stop()
	return nil, nil, fmt.Errorf("the demo did not say where it serves (see %s)", logPath)
}

// startProxy serves a reverse proxy to target on a free loopback port
// that adds a bearer token and leaves Host and Origin as the client sent
// them.
func startProxy(target *url.URL, token string) (net.Listener, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		FlushInterval: -1, // server-sent events as they come
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	go http.Serve(lis, p)
	return lis, nil
}

// check is one check of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// readResults reads the checks of every scenario the suite ran, by
// scenario: the suite writes each into a directory named
// server-<scenario>-<time>.
func readResults(dir string) (map[string][]check, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the suite wrote no results: %w", err)
	}
	stamp := regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$`)
	out := map[string][]check{}
	for _, e := range entries {
		m := stamp.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			return nil, err
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out[m[1]] = append(out[m[1]], checks...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the suite ran no scenario (see its log)")
	}
	return out, nil
}

// judge prints the table of scenarios and fails on an applicable
// scenario with a failed check, or a list that does not match the run.
func judge(w io.Writer, list []scenario, results map[string][]check, took time.Duration) error {
	var problems []error
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tapplies\tresult\twhy")
	for _, s := range list {
		checks, ran := results[s.name]
		if !ran {
			problems = append(problems, fmt.Errorf("%s is listed but the suite did not run it", s.name))
			continue
		}
		delete(results, s.name)
		passed, failed, warned := 0, 0, 0
		var failures []string
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				passed++
			case "FAILURE":
				failed++
				failures = append(failures, c.ID+": "+c.ErrorMessage)
			case "WARNING":
				warned++
			}
		}
		result := fmt.Sprintf("%d passed, %d failed", passed, failed)
		if warned > 0 {
			result += fmt.Sprintf(", %d warnings", warned)
		}
		applies := "no (" + s.class + ")"
		if s.class == "applies" {
			applies = "yes"
			if failed > 0 {
				problems = append(problems, fmt.Errorf("%s applies and failed: %s", s.name, strings.Join(failures, "; ")))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.name, applies, result, s.why)
	}
	tw.Flush()
	for name := range results {
		problems = append(problems, fmt.Errorf("the suite ran %s, which scenarios.txt does not classify", name))
	}
	fmt.Fprintf(w, "MCP conformance suite: %d scenarios in %s\n", len(list), took.Round(time.Second))
	return errors.Join(problems...)
}
