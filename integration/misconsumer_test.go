package integration

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// A mis-set consumer, made visible. Three processes of one service compete for one RabbitMQ
// queue, each with one router handler "billing" and its own logger and metrics, as three
// hosts would run it; every order is published twice. With Config.Consumer taken from the
// host name by accident, copies that reach two processes both run, silently; each process's
// log says what it claims under, the processed-messages metric shows one handler under three
// consumers (the alert docs/guarantees.md gives), and "watermill-inbox stats" names the three.
// With one Consumer, none of it.
func TestConsumersTakenFromTheHostNameAreFlagged(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	cli := commandLines(t, "watermill-inbox")["watermill-inbox"]
	for _, tt := range []struct {
		name     string
		consumer func(host string) string
		flagged  bool
	}{
		{"from the host name", func(host string) string { return "billing@" + host }, true},
		{"one consumer", func(string) string { return "billing" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := pgxBackend(t)
			queue := chaosQueue(t, amqpURL, testenv.Name("hosts"))
			config := amqp.NewDurableQueueConfig(amqpURL)
			hosts := []string{"host-a", "host-b", "host-c"}
			var runs []*consumerRun
			var loggers []*watermill.CaptureLoggerAdapter
			var readers []*sdkmetric.ManualReader
			for _, host := range hosts {
				logger := watermill.NewCaptureLogger()
				reader := sdkmetric.NewManualReader()
				provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
				t.Cleanup(func() { _ = provider.Shutdown(context.WithoutCancel(context.Background())) })
				sub, err := amqp.NewSubscriber(config, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Close() })
				runs = append(runs, startProcess(t, b, inbox.Config{Consumer: tt.consumer(host), MeterProvider: provider}, logger, queue.name, sub))
				loggers, readers = append(loggers, logger), append(readers, reader)
			}
			publisher, err := amqp.NewPublisher(config, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			defer publisher.Close()
			if err := publisher.Publish(queue.name, orderCopies()...); err != nil {
				t.Fatal(err)
			}
			waitAckedAcross(t, runs, consumerOrders*consumerCopies)

			invoices := b.rows(t, b.business, "")
			t.Logf("%d invoices for %d orders", invoices, consumerOrders)
			if doubled := invoices > consumerOrders; doubled != tt.flagged {
				t.Errorf("%d invoices for %d orders; doubled = %v, want %v", invoices, consumerOrders, doubled, tt.flagged)
			}

			// Each process's log: its consumer at start-up, and the handler's with its first message.
			for i, logger := range loggers {
				want := tt.consumer(hosts[i])
				start := infoFields(logger, "inbox: middleware claims under its consumer")
				handler := infoFields(logger, "inbox: router handler claims under its consumer")
				if len(start) != 1 || start[0]["consumer"] != want || len(handler) != 1 ||
					handler[0]["handler_name"] != "billing" || handler[0]["consumer"] != want {
					t.Errorf("%s's log: start-up %v, handler %v; want one line each with consumer %s", hosts[i], start, handler, want)
				}
			}

			// The alert: one handler's messages processed under more than one consumer, across
			// the processes' metrics.
			consumersOf := map[string][]string{}
			for _, reader := range readers {
				for handler, consumers := range processedBy(t, reader) {
					for _, c := range consumers {
						if !slices.Contains(consumersOf[handler], c) {
							consumersOf[handler] = append(consumersOf[handler], c)
						}
					}
				}
			}
			if alert := len(consumersOf["billing"]) > 1; alert != tt.flagged {
				t.Errorf("handler billing processed under %v: alert = %v, want %v", consumersOf["billing"], alert, tt.flagged)
			}

			stats := runCommand(t, cli, "stats", "-dsn", b.dsn, "-table", b.table)
			flagged := regexp.MustCompile(`(?m)^one handler, several consumers\?\s+(.*): each claimed keys alone`).FindStringSubmatch(stats)
			switch {
			case tt.flagged && (flagged == nil || flagged[1] != "billing@host-a, billing@host-b, billing@host-c"):
				t.Errorf("stats does not name the three consumers:\n%s", stats)
			case !tt.flagged && flagged != nil:
				t.Errorf("stats flags %s with one consumer:\n%s", flagged[1], stats)
			}
		})
	}
}

// startProcess runs a router with one handler "billing" on topic behind an inbox middleware
// built from config, logging to logger: one process of a service.
func startProcess(t *testing.T, b *backend, config inbox.Config, logger watermill.LoggerAdapter, topic string, sub message.Subscriber) *consumerRun {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, config, logger)
	if err != nil {
		t.Fatal(err)
	}
	r := &consumerRun{b: b, done: make(chan struct{}), nacks: map[string]int{}}
	if r.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{}); err != nil {
		t.Fatal(err)
	}
	r.router.AddMiddleware(r.count, mw)
	r.router.AddConsumerHandler("billing", topic, sub, func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := b.inTx(ctx)
		if !ok {
			return errors.New("no inbox transaction in the handler's context")
		}
		return tx.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		if err := r.router.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); r.stop(t) })
	<-r.router.Running()
	return r
}

// waitAckedAcross waits until the runs acked n deliveries in all, and fails on any nack.
func waitAckedAcross(t *testing.T, runs []*consumerRun, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		acked := 0
		for _, r := range runs {
			r.mu.Lock()
			acked += r.acked
			if len(r.nacks) > 0 {
				t.Fatalf("nacks: %v", r.nacks)
			}
			r.mu.Unlock()
		}
		if acked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries acked", acked, n)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// infoFields returns the fields of logger's info lines with the message msg.
func infoFields(logger *watermill.CaptureLoggerAdapter, msg string) []watermill.LogFields {
	var fields []watermill.LogFields
	for _, line := range logger.Captured()[watermill.InfoLogLevel] {
		if line.Msg == msg {
			fields = append(fields, line.Fields)
		}
	}
	return fields
}

// processedBy returns, by handler, the consumers of the processed-messages counter's points.
func processedBy(t *testing.T, reader *sdkmetric.ManualReader) map[string][]string {
	t.Helper()
	var data metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &data); err != nil {
		t.Fatal(err)
	}
	by := map[string][]string{}
	for _, scope := range data.ScopeMetrics {
		for _, m := range scope.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != inboxotel.MetricProcessed || !ok {
				continue
			}
			for _, point := range sum.DataPoints {
				handler, _ := point.Attributes.Value("handler")
				consumer, _ := point.Attributes.Value("consumer")
				if point.Value > 0 {
					by[handler.AsString()] = append(by[handler.AsString()], consumer.AsString())
				}
			}
		}
	}
	return by
}
