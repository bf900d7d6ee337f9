package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// republishedLog is the middleware's line for a duplicate that published its record again.
const republishedLog = "Inbox: duplicate message skipped, its produced messages published again"

// 200 orders over HTTP, each sent by 3 clients at once (a 409 retried), with its event
// published to a Redis stream, on every store: the stream holds exactly one entry per order
// plus one per replay that published again because its record's mark was not written yet
// (counted from the middleware's log, and reported); a fourth copy of every order, sent
// after the marks are written, adds none.
func TestHTTPReplaysPublishOnlyWhatHasNotLeft(t *testing.T) {
	t.Parallel()
	forEachHTTPMode(t, slices.Collect(maps.Keys(httpStores)), func(t *testing.T, b *backend, writeBehind bool) {
		const orders, copies = 200, 3
		addr := testenv.RedisAddr(t)
		client := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { client.Close() })
		stream := testenv.Name("invoices")
		t.Cleanup(func() { _ = client.Del(context.WithoutCancel(context.Background()), stream).Err() })
		broker, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		publisher, err := inbox.NewPublisher(broker)
		if err != nil {
			t.Fatal(err)
		}
		handler := publishingOrders(b, publisher, stream, func(r *http.Request) string { return "invoice-of-" + r.Header.Get("X-Order") })
		logger := watermill.NewCaptureLogger()
		server := endpoint(t, b, inboxhttp.Config{WriteBehind: writeBehind, Publisher: publisher}, handler, logger)
		var conflicts atomic.Int64
		sendAll := func(parallel int) {
			var wg sync.WaitGroup
			for i := range orders {
				key := fmt.Sprintf("order-%03d", i)
				for range parallel {
					wg.Go(func() {
						for {
							r, err := send(server.Client(), server.URL, key, key, nil)
							if err == nil && r.status == http.StatusConflict {
								conflicts.Add(1)
								time.Sleep(5 * time.Millisecond) // the client's back-off
								continue
							}
							if err != nil || r.status != http.StatusCreated {
								t.Errorf("%s: %v %d %s", key, err, r.status, r.body)
							}
							return
						}
					})
				}
			}
			wg.Wait()
		}
		republished := func() int {
			n := 0
			for _, m := range logger.Captured()[watermill.DebugLogLevel] {
				if m.Msg == republishedLog {
					n++
				}
			}
			return n
		}
		entries := func() int64 {
			n, err := client.XLen(context.Background(), stream).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		sendAll(copies)
		if err := sqlStore(t, b).FlushMarks(context.Background()); err != nil {
			t.Fatal(err)
		}
		before, again := entries(), republished()
		t.Logf("%d orders sent %d times at once: %d stream entries, %d of them replays published before their mark was written; %d conflicts retried",
			orders, copies, before, again, conflicts.Load())
		if before != int64(orders+again) {
			t.Errorf("%d stream entries, want %d orders + %d replays that published again", before, orders, again)
		}
		wantRows(t, "business rows", b.rows(t, b.business, "WHERE consumer = ?", "billing"), orders)

		sendAll(1)
		if after := entries(); after != before || republished() != again {
			t.Errorf("a copy of every order after the marks: %d stream entries, %d replays published again; want %d and %d", after, republished(), before, again)
		}
	})
}
