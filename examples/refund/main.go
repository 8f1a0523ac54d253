// Command refund shows agentsafe protecting an order service from an AI
// agent that times out, loops and calls twice. It starts the service over
// Connect (capabilities in orders.proto, one interceptor) and runs a
// scripted agent against it over real HTTP, printing what happened and the
// audit trail of every call.
//
//	go run ./examples/refund                 # the story, on the in-memory stores
//	go run ./examples/refund -redis redis://127.0.0.1:6379/0
//	go run ./examples/refund -postgres postgres://user@127.0.0.1:5432/db  # approvals, results and the audit trail in PostgreSQL
//	go run ./examples/refund -console        # a person approves in the browser
//	go run ./examples/refund -serve          # keep serving, for curl and MCP clients at /mcp
//	go run ./examples/refund -audit trail.jsonl  # the whole audit trail as JSON Lines, hash-chained and signed
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

func main() {
	redisURL := flag.String("redis", "", "keep approvals, stored results and budgets in Redis at this URL (redis://host:port/db) instead of in memory")
	postgresURL := flag.String("postgres", "", "keep approvals, stored results, budgets and a strict audit trail in PostgreSQL at this URL (postgres://user@host:port/db); the schema agentsafe is created if missing")
	serve := flag.Bool("serve", false, "keep serving on -addr for manual calls instead of running the scripted agent")
	console := flag.Bool("console", false, "wait for a person to approve in the approval console instead of approving automatically")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on with -serve or -console")
	audit := flag.String("audit", "", "write the whole audit trail to this file as JSON Lines, hash-chained, with signed checkpoints (FILE.pub holds the public key, FILE.checkpoints the checkpoints); the file is overwritten")
	flag.Parse()
	if *redisURL != "" && *postgresURL != "" {
		fmt.Fprintln(os.Stderr, "refund: -redis and -postgres are two places for the same approvals: choose one")
		os.Exit(2)
	}
	if err := run(storeConfig{redis: *redisURL, postgres: *postgresURL, audit: *audit}, *serve, *console, *addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "refund:", err)
		os.Exit(1)
	}
}

// storeConfig says where approvals and results live: in memory unless a
// URL is given; and where the audit trail goes as JSON Lines, if anywhere.
type storeConfig struct{ redis, postgres, audit string }

// stores is where approvals, results and budgets live, the engine
// options that go with them (a strict audit sink in PostgreSQL), and how
// to close them.
type stores struct {
	approvals store.ApprovalStore
	results   store.ResultStore
	budgets   store.BudgetStore
	opts      []middleware.Option
	close     func()
}

func run(where storeConfig, serve, console bool, addr string, out io.Writer) (err error) {
	st, err := openStores(where)
	if err != nil {
		return err
	}
	defer st.close()
	opts := st.opts
	var trail *auditTrail
	if where.audit != "" {
		if trail, err = openAuditTrail(where.audit); err != nil {
			return err
		}
		opts = append(opts[:len(opts):len(opts)], trail.option(where.postgres == ""))
	}
	s, err := newServer(st, opts...)
	if err != nil {
		if trail != nil {
			trail.close(nil)
		}
		return err
	}
	if trail != nil {
		defer func() {
			if cerr := trail.close(s.eng); err == nil && cerr != nil {
				err = fmt.Errorf("-audit: %w", cerr)
			}
		}()
	}
	if !serve && !console {
		addr = "127.0.0.1:0"
	}
	if err := s.start(addr); err != nil {
		return err
	}
	defer s.close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if serve {
		printCurl(out, s.url)
		<-ctx.Done()
		return nil
	}
	approve := autoApprove(s)
	if console {
		approve = consoleApprove(s, out)
	}
	if _, err = newAgent(s, out).run(ctx, approve); err == nil && trail != nil {
		trail.printVerify(out)
	}
	return err
}

// openStores opens the approval, result and budget stores: in memory, all
// in Redis, or all in PostgreSQL. It never falls back to memory silently.
func openStores(where storeConfig) (stores, error) {
	switch {
	case where.redis != "":
		return openRedis(where.redis)
	case where.postgres != "":
		return openPostgres(where.postgres)
	}
	return inMemory(), nil
}

// inMemory is every store in this process: the demo's default.
func inMemory() stores {
	return stores{approvals: approvalstore.NewMemory(), results: resultstore.NewMemory(), budgets: budgetstore.NewMemory(), close: func() {}}
}

func openRedis(url string) (stores, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return stores{}, fmt.Errorf("-redis: %w", err)
	}
	client := redis.NewClient(opts)
	approvals, err := approvalstore.NewRedis(client)
	if err != nil {
		client.Close()
		return stores{}, fmt.Errorf("-redis: %w", err)
	}
	results, err := resultstore.NewRedis(client)
	if err != nil {
		client.Close()
		return stores{}, fmt.Errorf("-redis: %w", err)
	}
	budgets, err := budgetstore.NewRedis(client)
	if err != nil {
		client.Close()
		return stores{}, fmt.Errorf("-redis: %w", err)
	}
	return stores{approvals: approvals, results: results, budgets: budgets, close: func() { client.Close() }}, nil
}

// openPostgres keeps approvals and results in PostgreSQL, with the audit
// trail beside them: the strict audit sink commits capability.requested
// and .started before anything runs.
func openPostgres(url string) (stores, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return stores{}, fmt.Errorf("-postgres: %w", err)
	}
	fail := func(err error) (stores, error) {
		pool.Close()
		return stores{}, fmt.Errorf("-postgres: %w", err)
	}
	if err := agentsafepg.Migrate(ctx, pool); err != nil {
		return fail(err)
	}
	approvals, err := agentsafepg.NewApprovalStore(pool)
	if err != nil {
		return fail(err)
	}
	results, err := agentsafepg.NewResultStore(pool)
	if err != nil {
		return fail(err)
	}
	budgets, err := agentsafepg.NewBudgetStore(pool)
	if err != nil {
		return fail(err)
	}
	audit, err := agentsafepg.NewAuditSink(pool)
	if err != nil {
		return fail(err)
	}
	closeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = audit.Close(ctx) // once the write in progress has ended
		pool.Close()
	}
	return stores{approvals: approvals, results: results, budgets: budgets, opts: []middleware.Option{middleware.WithAuditSink(audit)}, close: closeAll}, nil
}

// autoApprove plays the manager: it decides through the engine, as an
// admin endpoint or the approval console would.
func autoApprove(s *server) approver {
	return func(ctx context.Context, id string) error {
		rec, err := s.eng.Decide(ctx, id, store.Decision{Approve: true, Approver: manager, Comment: "ok, the customer called"})
		if err == nil {
			what := rec.View
			if rec.PreviewText != "" { // the effect as the server computed it
				what = rec.PreviewText
			}
			fmt.Fprintf(os.Stdout, "   %s (%s) approved %q, requested by %s for: %s\n", manager.ID, rec.Type, id, rec.Requester.ID, what)
		}
		return err
	}
}

// consoleApprove waits for a person to decide in the approval console.
func consoleApprove(s *server, out io.Writer) approver {
	return func(ctx context.Context, id string) error {
		fmt.Fprintf(out, "\n   >>> open %s/console/ (log in as bob / bob) and approve %s\n", s.url, id)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		for {
			rec, err := s.eng.Get(ctx, id)
			if err != nil {
				return err
			}
			if rec.Status != store.ApprovalPending {
				fmt.Fprintf(out, "   %s %s it: %q\n", rec.Approver.ID, rec.Status, rec.Comment)
				return nil
			}
			select {
			case <-ctx.Done():
				return errors.New("nobody decided the approval in time")
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

func printCurl(out io.Writer, url string) {
	fmt.Fprintf(out, `Serving the order service on %[1]s (Ctrl-C to stop). Try:

  # a read, with the execution id and attempts in the response headers
  curl -si %[1]s/orders.v1.OrderService/GetOrder -H 'Authorization: Bearer agent-token' \
    -H 'Content-Type: application/json' -d '{"orderId":"42"}'

  # a large refund: failed_precondition (HTTP 400), code APPROVAL_REQUIRED, and an approval id
  curl -si %[1]s/orders.v1.OrderService/RefundOrder -H 'Authorization: Bearer agent-token' \
    -H 'Content-Type: application/json' -d '{"orderId":"43","amountCents":150000}'

  # approve it: in the browser at %[1]s/console/ (bob / bob), or with the console's JSON API
  TOKEN=$(curl -s -u bob:bob %[1]s/console/api/session | sed 's/.*"csrfToken":"\([^"]*\)".*/\1/')
  curl -s -u bob:bob -X POST %[1]s/console/api/approvals/APPROVAL_ID/decision \
    -H "Agentsafe-Csrf-Token: $TOKEN" -H 'Content-Type: application/json' -d '{"approve":true,"comment":"ok"}'

  # the same procedures as MCP tools (streamable HTTP), for an MCP client such as an agent:
  #   %[1]s/mcp  with the header  Authorization: Bearer agent-token

  # resume the same call with the approval id: it runs once; a second time is refused
  curl -si %[1]s/orders.v1.OrderService/RefundOrder -H 'Authorization: Bearer agent-token' \
    -H 'Agentsafe-Approval-Id: APPROVAL_ID' -H 'Content-Type: application/json' -d '{"orderId":"43","amountCents":150000}'
`, url)
}
