package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// eventLog collects what a subscriber received: the UUIDs of every copy, in order.
type eventLog struct {
	mu    sync.Mutex
	uuids []string
}

// subscribeEvents subscribes to topic on a gochannel pub/sub that t closes, and logs every
// message it gets.
func subscribeEvents(t *testing.T, topic string) (*gochannel.GoChannel, *eventLog) {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { pubSub.Close() })
	received, err := pubSub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	go func() {
		for m := range received {
			log.mu.Lock()
			log.uuids = append(log.uuids, m.UUID)
			log.mu.Unlock()
			m.Ack()
		}
	}()
	return pubSub, log
}

// counts returns the number of copies received and of distinct UUIDs among them. With
// BlockPublishUntilSubscriberAck a copy is logged before its Publish returns.
func (l *eventLog) counts() (copies, distinct int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, u := range l.uuids {
		seen[u] = true
	}
	return len(l.uuids), len(seen)
}

// eventInbox is an inbox on store, set as config says, whose handler publishes the event
// "event-of-" and its message's UUID to the topic "events" through an inbox.Publisher over
// broker; deliver hands it a message of uuid and returns the delivery's error.
func eventInbox(t *testing.T, store inbox.Store, broker message.Publisher, config inbox.Config) (deliver func(uuid string) error) {
	t.Helper()
	publisher, err := inbox.NewPublisher(broker)
	if err != nil {
		t.Fatal(err)
	}
	config.Publisher = publisher
	mw, err := inbox.NewMiddleware(store, config, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	handle := mw(func(msg *message.Message) ([]*message.Message, error) {
		event := message.NewMessage("event-of-"+msg.UUID, nil)
		event.SetContext(msg.Context())
		return nil, publisher.Publish("events", event)
	})
	return func(uuid string) error {
		_, err := handle(message.NewMessage(uuid, nil))
		return err
	}
}

func sqlStore(t *testing.T, b *backend) *sqlinbox.Store {
	t.Helper()
	s, ok := b.store.(*sqlinbox.Store)
	if !ok {
		t.Fatalf("store %T is not a *sqlinbox.Store", b.store)
	}
	return s
}

// newRelay returns a relay of b's table that publishes to publisher whatever is older than
// 1 µs: a test's records, committed before the pass starts.
func newRelay(t *testing.T, b *backend, publisher message.Publisher, batch int) *sqlinbox.RelayRunner {
	t.Helper()
	relay, err := sqlinbox.NewRelayRunner(sqlStore(t, b), sqlinbox.RelayConfig{Publisher: publisher, Delay: time.Microsecond, BatchSize: batch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

func wantBacklog(t *testing.T, b *backend, want int64) {
	t.Helper()
	backlog, err := sqlStore(t, b).Backlog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if backlog.Records != want {
		t.Errorf("backlog %d unpublished records, want %d", backlog.Records, want)
	}
}

// The Done-when of the HTTP path: a request commits while the broker is down and its client
// never retries. It is answered with its committed 201; the record stays unpublished; the
// relay publishes its event once, and a second pass publishes nothing.
func TestRelayPublishesWhatACommittedRequestCouldNot(t *testing.T) {
	forEachHTTPMode(t, slices.Collect(maps.Keys(httpStores)), func(t *testing.T, b *backend, writeBehind bool) {
		events, log := subscribeEvents(t, "invoices")
		broker := &failingPublisher{Publisher: events}
		broker.failuresLeft.Store(1)
		publisher, err := inbox.NewPublisher(broker)
		if err != nil {
			t.Fatal(err)
		}
		handler := publishingOrders(b, publisher, "invoices", func(*http.Request) string { return watermill.NewUUID() })
		server := endpoint(t, b, inboxhttp.Config{WriteBehind: writeBehind, Publisher: publisher}, handler, watermill.NopLogger{})

		if first := post(t, server.Client(), server.URL, "order-1", "order-1", nil); first.status != http.StatusCreated {
			t.Fatalf("the request whose publish failed after the commit: %d %s, want its 201", first.status, first.body)
		}
		if copies, _ := log.counts(); copies != 0 || broker.failed.Load() != 1 {
			t.Fatalf("%d events left and %d publishes failed before the relay, want 0 and 1", copies, broker.failed.Load())
		}
		wantBacklog(t, b, 1)

		relay := newRelay(t, b, events, 10)
		if n, err := relay.Pass(context.Background()); n != 1 || err != nil {
			t.Fatalf("relay pass: %d published, %v; want 1", n, err)
		}
		if n, err := relay.Pass(context.Background()); n != 0 || err != nil {
			t.Fatalf("second relay pass: %d published, %v; want 0", n, err)
		}
		if copies, distinct := log.counts(); copies != 1 || distinct != 1 {
			t.Errorf("%d copies of %d events, want the 1 event once", copies, distinct)
		}
		wantBacklog(t, b, 0)
	})
}

// A broker message whose handler published through an inbox.Publisher that failed, and that
// never comes back (dropped after its nack, or poisoned): the relay publishes its record.
// Once marked, a duplicate publishes nothing again; a record not yet marked is published by
// its duplicate, as before, and marked then.
func TestRelayAndMarksOnBrokerMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, writeBehind := range []bool{false, true} {
			t.Run(map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
				testRelayAndMarks(t, b, writeBehind)
			})
		}
	})
}

func testRelayAndMarks(t *testing.T, b *backend, writeBehind bool) {
	events, log := subscribeEvents(t, "events")
	broker := &failingPublisher{Publisher: events}
	deliver := eventInbox(t, b.store, broker, inbox.Config{Consumer: watermill.NewShortUUID(), WriteBehind: writeBehind})
	store := sqlStore(t, b)
	flush := func() {
		t.Helper()
		if err := store.FlushMarks(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	startBacklog := backlogOf(t, b)

	// Published at once: marked, and its duplicate publishes nothing.
	if err := deliver("healthy"); err != nil {
		t.Fatal(err)
	}
	flush()
	if got := backlogOf(t, b) - startBacklog; got != 0 {
		t.Errorf("after a published record: backlog +%d, want +0", got)
	}
	if err := deliver("healthy"); err != nil {
		t.Fatal(err)
	}
	if copies, _ := log.counts(); copies != 1 {
		t.Errorf("%d copies after the duplicate of a marked record, want 1: the duplicate published again", copies)
	}

	// Its publish fails, the delivery errors (the router would nack) and it never comes back.
	broker.failuresLeft.Store(1)
	if err := deliver("dropped"); err == nil {
		t.Fatal("the delivery whose publish failed returned no error")
	}
	// Its publish fails too, and then its duplicate comes back: it publishes and marks.
	broker.failuresLeft.Store(1)
	if err := deliver("redelivered"); err == nil {
		t.Fatal("the delivery whose publish failed returned no error")
	}
	if got := backlogOf(t, b) - startBacklog; got != 2 {
		t.Errorf("after two failed publishes: backlog +%d, want +2", got)
	}
	if err := deliver("redelivered"); err != nil {
		t.Fatal(err)
	}
	flush()
	if got := backlogOf(t, b) - startBacklog; got != 1 {
		t.Errorf("after the redelivery published its record: backlog +%d, want +1 (the dropped one)", got)
	}
	if copies, _ := log.counts(); copies != 2 {
		t.Errorf("%d copies before the relay, want 2 (healthy, redelivered)", copies)
	}

	relay := newRelay(t, b, events, 100)
	published := 0
	for {
		n, err := relay.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		published += n
	}
	if published != int(startBacklog)+1 {
		t.Errorf("the relay published %d records, want %d", published, startBacklog+1)
	}
	if !slices.Contains(log.snapshot(), "event-of-dropped") {
		t.Errorf("the dropped message's event never left: %v", log.snapshot())
	}
	if got := backlogOf(t, b); got != 0 {
		t.Errorf("backlog %d after the relay, want 0", got)
	}
}

func backlogOf(t *testing.T, b *backend) int64 {
	t.Helper()
	backlog, err := sqlStore(t, b).Backlog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return backlog.Records
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.uuids)
}

// Two relays over one table at once, on every store: 120 unpublished records, each published
// by exactly one pass of one of them.
func TestTwoRelaysPublishEachRecordOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const records = 120
		events, log := subscribeEvents(t, "events")
		broker := &failingPublisher{Publisher: events}
		broker.failuresLeft.Store(records)
		deliver := eventInbox(t, b.store, broker, inbox.Config{Consumer: watermill.NewShortUUID()})
		for range records {
			if err := deliver(watermill.NewUUID()); err == nil {
				t.Fatal("a delivery whose publish failed returned no error")
			}
		}
		start := backlogOf(t, b)
		if start < records {
			t.Fatalf("backlog %d, want at least %d", start, records)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for range 2 {
			relay := newRelay(t, b, events, 10)
			wg.Go(func() {
				for {
					n, err := relay.Pass(context.Background())
					if err != nil && !b.retriable(err) {
						t.Error(err)
						return
					}
					mu.Lock()
					total += n
					mu.Unlock()
					if err == nil && n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		copies, distinct := log.counts()
		if int64(total) != start || copies != distinct || int64(distinct) != start {
			t.Errorf("two relays published %d records as %d copies of %d events; want each of the %d once", total, copies, distinct, start)
		}
	})
}

// Retention with unpublished records present: it deletes the published claims older than
// the retention and none of the unpublished ones.
func TestRetentionKeepsUnpublishedRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		events, _ := subscribeEvents(t, "events")
		broker := &failingPublisher{Publisher: events}
		consumer := watermill.NewShortUUID()
		deliver := eventInbox(t, b.store, broker, inbox.Config{Consumer: consumer})
		for _, uuid := range []string{"published-1", "published-2"} {
			if err := deliver(uuid); err != nil {
				t.Fatal(err)
			}
		}
		broker.failuresLeft.Store(3)
		for _, uuid := range []string{"unpublished-1", "unpublished-2", "unpublished-3"} {
			if err := deliver(uuid); err == nil {
				t.Fatal("a delivery whose publish failed returned no error")
			}
		}
		if err := sqlStore(t, b).FlushMarks(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := sqlStore(t, b).Cleanup(context.Background(), time.Microsecond, sqlinbox.CleanupConfig{}); err != nil {
			t.Fatal(err)
		}
		for _, uuid := range []string{"published-1", "published-2"} {
			wantRows(t, "claims of "+uuid, b.claims(t, consumer, uuid), 0)
		}
		for _, uuid := range []string{"unpublished-1", "unpublished-2", "unpublished-3"} {
			wantRows(t, "claims of "+uuid, b.claims(t, consumer, uuid), 1)
		}
	})
}

// A table made before the column unpublished (by hand, as an earlier release's migration
// made it) is used as before, and a relay on it is refused with the way to add the column.
func TestRelayRefusesATableWithoutTheColumn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		table := b.table + "_old"
		create := "CREATE TABLE " + table + " (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id), INDEX (processed_at)) ENGINE=InnoDB"
		switch b.dialect.Name() {
		case "postgres":
			create = "CREATE TABLE " + table + ` (consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`
		case "sqlite":
			create = "CREATE TABLE " + table + " (consumer TEXT NOT NULL, message_id TEXT NOT NULL, processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), payload_hash BLOB, produced BLOB, PRIMARY KEY (consumer, message_id))"
		}
		mustExec(t, b.direct, create)
		t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(context.Background()), "DROP TABLE "+table) })
		old, err := b.newStore(sqlinbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		store := old.(*sqlinbox.Store)
		if err := store.CheckTable(context.Background()); err != nil {
			t.Fatalf("the table of an earlier release is refused: %v", err)
		}
		events, log := subscribeEvents(t, "events")
		deliver := eventInbox(t, store, events, inbox.Config{Consumer: "billing"})
		for range 2 {
			if err := deliver("order-1"); err != nil {
				t.Fatal(err)
			}
		}
		if copies, distinct := log.counts(); copies != 2 || distinct != 1 {
			t.Errorf("on the old table: %d copies of %d events, want the event twice (its duplicate publishes again)", copies, distinct)
		}
		relay, err := sqlinbox.NewRelayRunner(store, sqlinbox.RelayConfig{Publisher: events}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = relay.Pass(context.Background())
		want := "schema -upgrade"
		if b.dialect.Name() == "sqlite" {
			want = "ADD COLUMN unpublished"
		}
		if !errors.Is(err, sqlinbox.ErrRelayUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("relay on the old table: %v; want ErrRelayUnavailable naming %q", err, want)
		}
	})
}

// markingStore is a store that reports each mark the middleware gives it, so that a test
// waits for the marks of messages the router acked instead of for time to pass.
type markingStore struct {
	*sqlinbox.Store
	marked chan inbox.Claim
}

func (s markingStore) MarkPublished(claim inbox.Claim) {
	s.Store.MarkPublished(claim)
	s.marked <- claim
}

// Messages a handler returns are published by the router after the inbox committed, and the
// router acks only after that publish: the record is marked when the router acks, on every
// store. A router whose publisher fails its first 3 publishes, 10 orders: each is marked
// once it is acked, and a second copy of every order, sent after the marks, publishes
// nothing again.
func TestReturnedMessagesAreMarkedWhenTheRouterAcks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const orders = 10
		logger := watermill.NopLogger{}
		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, logger)
		t.Cleanup(func() { pubSub.Close() })
		events, log := subscribeEvents(t, "invoices")
		broker := &failingPublisher{Publisher: events}
		broker.failuresLeft.Store(3)
		store := markingStore{Store: sqlStore(t, b), marked: make(chan inbox.Claim, 2*orders)}
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(mw)
		router.AddHandler("billing", "orders", pubSub, "invoices", broker, func(msg *message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("invoice-of-"+msg.UUID, nil)}, nil
		})
		runRouter(t, router)
		wait := func(round int) {
			t.Helper()
			for range orders {
				select {
				case <-store.marked:
				case <-time.After(time.Minute):
					t.Fatalf("round %d: not every order was marked", round)
				}
			}
		}
		for i := range orders {
			if err := pubSub.Publish("orders", message.NewMessage(fmt.Sprintf("order-%d", i), nil)); err != nil {
				t.Fatal(err)
			}
		}
		wait(1)
		if err := store.FlushMarks(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantBacklog(t, b, 0)
		copies, distinct := log.counts()
		if distinct != orders {
			t.Fatalf("%d invoices left, want %d", distinct, orders)
		}
		// A second copy of each, after the marks: duplicates that publish nothing, and are
		// not marked again.
		for i := range orders {
			if err := pubSub.Publish("orders", message.NewMessage(fmt.Sprintf("order-%d", i), nil)); err != nil {
				t.Fatal(err)
			}
		}
		sentinel := message.NewMessage("sentinel", nil)
		if err := pubSub.Publish("orders", sentinel); err != nil {
			t.Fatal(err)
		}
		select {
		case claim := <-store.marked:
			if claim.Key != "sentinel" {
				t.Errorf("the duplicate of %s was marked again", claim.Key)
			}
		case <-time.After(time.Minute):
			t.Fatal("the sentinel was not marked")
		}
		if again, _ := log.counts(); again != copies+1 {
			t.Errorf("%d copies after the duplicates and the sentinel, want %d: a duplicate of a marked record published again", again, copies+1)
		}
	})
}

// The runner, as a service runs it: a record whose publish failed is published by Run once
// it is older than Delay, and not before; the time it took is reported.
func TestRelayRunnerPublishesAfterItsDelay(t *testing.T) {
	b := backends["pgx/postgres"](t)
	events, log := subscribeEvents(t, "events")
	broker := &failingPublisher{Publisher: events}
	broker.failuresLeft.Store(1)
	deliver := eventInbox(t, b.store, broker, inbox.Config{Consumer: "billing"})
	committed := time.Now()
	if err := deliver("order-1"); err == nil {
		t.Fatal("the delivery whose publish failed returned no error")
	}
	const delay, interval = 300 * time.Millisecond, 100 * time.Millisecond
	arrived := make(chan time.Time, 1)
	relayed := &notifyingPublisher{Publisher: events, published: arrived}
	relay, err := sqlinbox.NewRelayRunner(sqlStore(t, b), sqlinbox.RelayConfig{Publisher: relayed, Delay: delay, Interval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case at := <-arrived:
		took := at.Sub(committed)
		t.Logf("published by the relay %s after the commit (Delay %s, Interval %s)", took.Round(time.Millisecond), delay, interval)
		if took < delay {
			t.Errorf("published %s after the commit, before its Delay of %s", took, delay)
		}
	case <-time.After(time.Minute):
		t.Fatal("the relay never published the record")
	}
	if copies, _ := log.counts(); copies != 1 {
		t.Errorf("%d copies, want 1", copies)
	}
}

// notifyingPublisher sends the time of each publish to published.
type notifyingPublisher struct {
	message.Publisher
	published chan<- time.Time
}

func (p *notifyingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	select {
	case p.published <- time.Now():
	default:
	}
	return err
}
