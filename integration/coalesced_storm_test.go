package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// MariaDB killed with SIGKILL three times under a burst of traffic on the coalesced store
// (sqlinbox.NewMultiStatementCoalesced, write-behind, two connections, eight router handlers
// on one RabbitMQ queue), and started again at once each time. Each kill meets a request in
// flight: the copies are published in three parts, each with one order (a single copy) whose
// claim another session holds locked, and the server is killed once a request waits on that
// lock. The requests in flight die with the server (the messages whose COMMIT it had run are
// committed, the others roll back in its crash recovery), every unsettled message is nacked
// as the store's failure, and RabbitMQ redelivers it. 600 orders as 1-3 copies: exactly one
// claim and one invoice per order, every copy acked, the queue empty, counted from another
// session.
func TestCoalescedServerKilledMidTraffic(t *testing.T) {
	t.Parallel()
	const orders, kills, handlers = 600, 3, 8
	ctx := context.Background()
	server := testenv.NewMariaDB(t)
	dsn := server.DSN("parseTime=true")
	direct := sqlRunner{openSQL(t, "mysql", dsn), false}
	table, business := testenv.Name("inbox"), testenv.Name("invoices")
	store, db, err := sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, mysqlMultiStatementsDSNOf(t, dsn)),
		sqlinbox.MySQL{}, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, direct, "CREATE TABLE "+business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")

	amqpURL := testenv.AMQPURL(t)
	queue := testenv.Name("coalesced_orders")
	broker := chaosQueue(t, amqpURL, queue)
	// parts[k] is what is published before kill k+1 (the last part after the last kill);
	// blockers[k] is part k's order whose claim is held locked, one copy of it.
	parts := make([][]*message.Message, kills+1)
	blockers := make([]string, kills)
	copies := 0
	for i := range orders {
		k := i * (kills + 1) / orders
		order := watermill.NewUUID()
		n := 1 + rand.IntN(3)
		if k < kills && blockers[k] == "" {
			blockers[k], n = order, 1
		}
		for c := range n {
			msg := message.NewMessage(order, []byte(`{"order":"`+order+`"}`))
			msg.Metadata.Set("copy", order+"/"+strconv.Itoa(c))
			parts[k] = append(parts[k], msg)
		}
		copies += n
	}
	for _, part := range parts {
		rand.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
	}

	var mu sync.Mutex
	acked := map[string]int{}
	nacked := 0
	router := writeBehindQueueRouter(t, store, amqpURL, queue, handlers,
		"INSERT INTO "+business+" (consumer, msg_key) VALUES (?, ?)", func(msg *message.Message, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				acked[msg.Metadata.Get("copy")]++
			} else {
				nacked++
			}
		})
	runCtx, stop := context.WithCancel(ctx)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-routerDone; err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	<-router.Running()

	publisher, err := amqp.NewPublisher(amqp.NewDurableQueueConfig(amqpURL), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	publish := func(part []*message.Message) {
		for batch := range chunks(part, 200) {
			if err := publisher.Publish(queue, batch...); err != nil {
				t.Fatal(err)
			}
		}
	}

	claims := func() int {
		n, err := direct.count(ctx, "SELECT COUNT(*) FROM "+table)
		if err != nil {
			return 0 // the server is down or starting
		}
		return n
	}
	deadline, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for k := range kills {
		lock := holdClaim(t, dsn, table, blockers[k])
		publish(parts[k])
		// The request that carries the blocker's claim runs it, waiting for the lock: the
		// server shows the claim, its key in hexadecimal, as the session's statement.
		waiting := func() bool {
			n, err := direct.count(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE ID <> ? AND COMMAND = 'Query' AND INFO LIKE CONCAT('%', LOWER(HEX(?)), '%')`, lock, blockers[k])
			return err == nil && n > 0
		}
		if !pollUntil(deadline, waiting) {
			t.Fatalf("kill %d: no request waits on the locked claim after 3 minutes", k+1)
		}
		server.Kill()
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
	}
	publish(parts[kills])
	// Every copy acked and none left: what the broker and the router say; the rows are
	// counted after.
	settled := func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		return n == copies && broker.ready(t) == 0
	}
	if !pollUntil(deadline, settled) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		t.Fatalf("after the kills: %d/%d copies acked, %d/%d claims, %d ready in the queue", n, copies, claims(), orders, broker.ready(t))
	}
	wantRows(t, "claims", claims(), orders)
	invoices, err := direct.count(ctx, "SELECT COUNT(*) FROM "+business)
	if err != nil {
		t.Fatal(err)
	}
	wantRows(t, "invoices", invoices, orders)
	doubled, err := direct.count(ctx, "SELECT COUNT(*) FROM (SELECT msg_key FROM "+business+" GROUP BY msg_key HAVING COUNT(*) > 1) d")
	if err != nil {
		t.Fatal(err)
	}
	wantRows(t, "orders with more than one invoice", doubled, 0)
	orphans, err := direct.count(ctx, "SELECT COUNT(*) FROM "+business+" i LEFT JOIN "+table+" c ON c.message_id = i.msg_key WHERE c.message_id IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	wantRows(t, "invoices without a claim", orphans, 0)
	mu.Lock()
	defer mu.Unlock()
	if t.Failed() {
		return
	}
	report(t, fmt.Sprintf("coalesced store, MariaDB killed %d times mid-traffic: %d orders, %d copies, all acked, exactly once; %d deliveries failed and were delivered again",
		kills, orders, copies, nacked))
}

// holdClaim claims (consumer billing, key) in table in a transaction left open on a session of
// its own, until the server dies or the test ends, and returns the session's connection id.
func holdClaim(t *testing.T, dsn, table, key string) int {
	t.Helper()
	ctx := context.Background()
	db := openSQL(t, "mysql", dsn)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var id int
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+table+" (consumer, message_id) VALUES ('billing', ?)", key); err != nil {
		t.Fatal(err)
	}
	return id
}
