// Command refund shows agentsafe protecting an order service from an AI
// agent that times out, loops and calls twice. It starts the service over
// Connect (capabilities in orders.proto, one interceptor) and runs a
// scripted agent against it over real HTTP, printing what happened and the
// audit trail of every call.
//
//	go run ./examples/refund                 # the story, on the in-memory approval store
//	go run ./examples/refund -redis redis://127.0.0.1:6379/0
//	go run ./examples/refund -console        # a person approves in the browser
//	go run ./examples/refund -serve          # keep serving, for curl and MCP clients at /mcp
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

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/redis/go-redis/v9"
)

func main() {
	redisURL := flag.String("redis", "", "keep approvals in Redis at this URL (redis://host:port/db) instead of in memory")
	serve := flag.Bool("serve", false, "keep serving on -addr for manual calls instead of running the scripted agent")
	console := flag.Bool("console", false, "wait for a person to approve in the approval console instead of approving automatically")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on with -serve or -console")
	flag.Parse()
	if err := run(*redisURL, *serve, *console, *addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "refund:", err)
		os.Exit(1)
	}
}

func run(redisURL string, serve, console bool, addr string, out io.Writer) error {
	store, closeStore, err := openStore(redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	s, err := newServer(store)
	if err != nil {
		return err
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
	_, err = newAgent(s, out).run(ctx, approve)
	return err
}

func openStore(redisURL string) (store.ApprovalStore, func(), error) {
	if redisURL == "" {
		return approvalstore.NewMemory(), func() {}, nil
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	client := redis.NewClient(opts)
	store, err := approvalstore.NewRedis(client)
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("-redis: %w", err) // never fall back to memory silently
	}
	return store, func() { client.Close() }, nil
}

// autoApprove plays the manager: it decides through the engine, as an
// admin endpoint or the approval console would.
func autoApprove(s *server) approver {
	return func(ctx context.Context, id string) error {
		rec, err := s.eng.Decide(ctx, id, store.Decision{Approve: true, Approver: manager, Comment: "ok, the customer called"})
		if err == nil {
			fmt.Fprintf(os.Stdout, "   %s (%s) approved %q, requested by %s for: %s\n", manager.ID, rec.Type, id, rec.Requester.ID, rec.View)
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
