package integration

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// relayKillVar holds "BACKEND TABLE DSN" for TestRelayKillHelper.
const relayKillVar = "INBOX_TEST_RELAY_KILL"

// blockedPublisher says on stdout that a publish began, then never returns: the process is
// killed between COMMIT and the publish.
type blockedPublisher struct{}

func (blockedPublisher) Publish(topic string, msgs ...*message.Message) error {
	fmt.Printf("publishing %s\n", msgs[0].UUID)
	select {}
}

func (blockedPublisher) Close() error { return nil }

// TestRelayKillHelper is the consumer process of TestRelayPublishesAfterAKillBetweenCommitAndPublish:
// it delivers one message whose handler publishes an event through an inbox.Publisher that
// blocks, on the store the backend names, until it is killed.
func TestRelayKillHelper(t *testing.T) {
	name, rest, _ := strings.Cut(os.Getenv(relayKillVar), " ")
	table, dsn, _ := strings.Cut(rest, " ")
	if dsn == "" {
		t.Skip("run by TestRelayPublishesAfterAKillBetweenCommitAndPublish")
	}
	ctx := context.Background()
	var store inbox.Store
	var err error
	switch name {
	case "pgx/postgres", "pgx-pipeline/postgres":
		pool, poolErr := pgxpool.New(ctx, dsn)
		if poolErr != nil {
			t.Fatal(poolErr)
		}
		if name == "pgx/postgres" {
			store, err = sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
		} else {
			store, err = sqlinbox.NewPgxPipeline(pool, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{})
		}
	case "database-sql/mariadb/multi-statements":
		store, _, err = sqlinbox.NewMultiStatement(mysqlConnector(t, dsn), sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	default:
		driver, dialect := map[string]string{"database-sql/postgres": "pgx", "database-sql/mariadb": "mysql", "database-sql/sqlite": "sqlite"}[name], sqlinbox.Dialect(sqlinbox.Postgres{})
		switch driver {
		case "mysql":
			dialect = sqlinbox.MySQL{}
		case "sqlite":
			dialect = sqlinbox.SQLite{}
		}
		db, openErr := sql.Open(driver, dsn)
		if openErr != nil {
			t.Fatal(openErr)
		}
		store, err = sqlinbox.NewDB(db, dialect, sqlinbox.Config{Table: table})
	}
	if err != nil {
		t.Fatal(err)
	}
	publisher, err := inbox.NewPublisher(blockedPublisher{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", Publisher: publisher}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
		event := message.NewMessage("event-of-"+msg.UUID, []byte("invoice"))
		event.SetContext(msg.Context())
		return nil, publisher.Publish("events", event)
	})(message.NewMessage("order-1", []byte(`{}`)))
	t.Fatalf("the delivery returned (%v): the publisher never returns", err)
}

// A consumer process SIGKILLed between COMMIT and the publish of its handler's event, on
// every store: the event never left, and a relay in this process publishes it, once.
func TestRelayPublishesAfterAKillBetweenCommitAndPublish(t *testing.T) {
	stores := map[string]newBackend{"pgx-pipeline/postgres": httpStores["pgx-pipeline/postgres"]}
	for _, name := range []string{"database-sql/mariadb", "database-sql/mariadb/multi-statements", "database-sql/postgres", "database-sql/sqlite", "pgx/postgres"} {
		stores[name] = backends[name]
	}
	for name, newBackend := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			publishing := make(chan string, 1)
			cmd, exited := startHelper(t, "TestRelayKillHelper", relayKillVar+"="+name+" "+b.table+" "+b.dsn, func(line string) {
				if uuid, ok := strings.CutPrefix(line, "publishing "); ok {
					publishing <- uuid
				}
			})
			var uuid string
			select {
			case uuid = <-publishing:
			case err := <-exited:
				t.Fatalf("the consumer process exited before its publish: %v", err)
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("the consumer process never began its publish")
			}
			_ = cmd.Process.Kill()
			<-exited
			if uuid != "event-of-order-1" {
				t.Fatalf("the consumer process published %q, want event-of-order-1", uuid)
			}
			wantRows(t, "claims", b.claims(t, "billing", "order-1"), 1)

			events, log := subscribeEvents(t, "events")
			if n, err := newRelay(t, b, events, 10).Pass(context.Background()); n != 1 || err != nil {
				t.Fatalf("relay pass after the kill: %d published, %v; want 1", n, err)
			}
			if got := log.snapshot(); len(got) != 1 || got[0] != uuid {
				t.Errorf("downstream got %v, want [%s] once", got, uuid)
			}
			wantBacklog(t, b, 0)
		})
	}
}
