package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// errPill is a handler's permanent refusal of a message: the only failure here that the
// poison queue may take.
var errPill = errors.New("order refused: no such product")

// retriesLogged counts the failures the recommended Retry logged as retried.
func retriesLogged(logger *watermill.CaptureLoggerAdapter) int {
	n := 0
	for _, m := range logger.Captured()[watermill.ErrorLogLevel] {
		if m.Msg == "Error occurred, retrying" {
			n++
		}
	}
	return n
}

// The recommended stack on a store whose table does not exist (a typo in Config.Table): the
// start-up check refuses it with the table check's message; a router started anyway retries
// every message, logged, and poisons none of them, not even the pill, whose claim fails
// first; once the table is created (by a migration, not through the store) every order is
// invoiced once, within 10 s (the table check's 5 s and one wait of Retry), and only the pill, which now reaches its handler, is
// poisoned, after its 3 retries.
func TestRecommendedStackPoisonsNothingOnAMissingTable(t *testing.T) {
	for _, name := range []string{"database-sql/sqlite", "pgx/postgres", "database-sql/mariadb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := backends[name](t)
			table := testenv.Name("inbox_typo")
			built, err := b.newStore(sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			store := built.(*sqlinbox.Store)
			t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table) })
			err = store.CheckTable(ctx)
			if !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("CheckTable on a missing table: %v, want ErrTableMismatch saying it does not exist", err)
			}

			const orders = 20
			logger := watermill.NewCaptureLogger()
			poison := &poisonRecorder{}
			pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			t.Cleanup(func() { _ = pubSub.Close() })
			router := recommendedRouter(t, store, pubSub, poison, logger, func(msg *message.Message) error {
				if string(msg.Payload) == "pill" {
					return errPill
				}
				r, ok := b.inTx(msg.Context())
				if !ok {
					return errors.New("no inbox transaction")
				}
				return r.exec(msg.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID)
			})
			for i := range orders + 1 {
				payload := "order"
				if i == orders {
					payload = "pill"
				}
				if err := pubSub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(payload))); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every message retried twice", func() bool { return retriesLogged(logger) >= 2*(orders+1) })
			if n := len(poison.poisoned()); n != 0 {
				t.Fatalf("%d messages poisoned on a missing table, want 0", n)
			}

			// The table created elsewhere (a migration), not through the store that refused it.
			migration, err := b.newStore(sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := migration.(*sqlinbox.Store).InitializeSchema(ctx); err != nil {
				t.Fatal(err)
			}
			created := time.Now()
			waitFor(t, "every order invoiced", func() bool { return b.rows(t, b.business, "") >= orders })
			healed := time.Since(created)
			waitFor(t, "the pill poisoned", func() bool { return len(poison.poisoned()) > 0 })
			if err := router.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d retries logged; every order invoiced %v after the table was created", retriesLogged(logger), healed.Round(time.Millisecond))
			if healed > 10*time.Second {
				t.Errorf("the orders were invoiced %v after the table was created, want within 10 s", healed)
			}
			wantRows(t, "invoices", b.rows(t, b.business, ""), orders)
			wantRows(t, "claims", b.rows(t, table, ""), orders)
			poisoned := poison.poisoned()
			if len(poisoned) != 1 || string(poisoned[0].Payload) != "pill" ||
				!strings.Contains(poisoned[0].Metadata.Get(middleware.ReasonForPoisonedKey), errPill.Error()) {
				t.Errorf("poisoned %d messages (%v), want the pill alone, for its own error", len(poisoned), poisoned)
			}
			gaveUp := 0
			for _, m := range logger.Captured()[watermill.ErrorLogLevel] {
				if errors.Is(m.Err, errPill) && m.Msg != "Error occurred, retrying" {
					gaveUp++
				}
			}
			if gaveUp != 1 {
				t.Errorf("the poisoned failure logged %d times at error level, want once", gaveUp)
			}
		})
	}
}

// recommendedRouter runs handle on the topic "orders" of pubSub behind the README's stack
// on store, with poison as the poison topic; it closes when the test ends.
func recommendedRouter(t *testing.T, store inbox.Store, pubSub *gochannel.GoChannel, poison message.Publisher,
	logger watermill.LoggerAdapter, handle message.NoPublishHandlerFunc,
) *message.Router {
	t.Helper()
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := recommendedPoisonStack(poison, "orders_poison", inboxMiddleware, 10*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(stack...)
	router.AddConsumerHandler("billing", "orders", pubSub, handle)
	go func() {
		if err := router.Run(context.Background()); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()
	return router
}

// Closing the router while messages wait in Retry for a table that does not exist ends the
// waits: Close returns at once, not after the router's CloseTimeout, and the messages it
// cancelled are not poisoned (a broker redelivers them after the restart).
func TestRouterCloseEndsRetryWaits(t *testing.T) {
	b := sqliteBackend(t)
	store, err := b.newStore(sqlinbox.Config{Table: testenv.Name("inbox_typo")})
	if err != nil {
		t.Fatal(err)
	}
	logger := watermill.NewCaptureLogger()
	poison := &poisonRecorder{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	router := recommendedRouter(t, store, pubSub, poison, logger, func(*message.Message) error { return nil })
	const orders = 5
	for range orders {
		if err := pubSub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte("order"))); err != nil {
			t.Fatal(err)
		}
	}
	// Five retries each: the waits are now 855 ms and more.
	waitFor(t, "every message retried 5 times", func() bool { return retriesLogged(logger) >= 5*orders })
	start := time.Now()
	if err := router.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v with messages waiting in Retry, want them cancelled at once", took)
	} else {
		t.Logf("Close returned in %v", took.Round(time.Millisecond))
	}
	if n := len(poison.poisoned()); n != 0 {
		t.Errorf("%d messages poisoned by the close, want 0", n)
	}
}
