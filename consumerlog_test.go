package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

// infoLines returns the info lines of logger with the message msg.
func infoLines(logger *watermill.CaptureLoggerAdapter, msg string) []watermill.LogFields {
	var fields []watermill.LogFields
	for _, line := range logger.Captured()[watermill.InfoLogLevel] {
		if line.Msg == msg {
			fields = append(fields, line.Fields)
		}
	}
	return fields
}

// Each middleware logs at info level what it claims under: its consumer (or its map) once at
// construction, and each router handler's consumer once, with the handler's first message,
// so that processes whose consumers differ by accident show it in their logs.
func TestMiddlewareLogsItsConsumers(t *testing.T) {
	for _, tt := range []struct {
		config   inbox.Config
		start    watermill.LogFields
		handlers map[string]string // the consumer logged for each handler
	}{
		{inbox.Config{Consumer: "billing@host-a"}, watermill.LogFields{"consumer": "billing@host-a", "write_behind": false},
			map[string]string{"billing-0": "billing@host-a", "billing-1": "billing@host-a"}},
		{inbox.Config{ConsumerByHandler: map[string]string{"billing-1": "billing", "billing-0": "billing"}, WriteBehind: true},
			watermill.LogFields{"consumer_by_handler": "billing-0=billing,billing-1=billing", "write_behind": true},
			map[string]string{"billing-0": "billing", "billing-1": "billing"}},
	} {
		logger := watermill.NewCaptureLogger()
		mw, err := inbox.NewMiddleware(newFakeStore(), tt.config, logger)
		if err != nil {
			t.Fatal(err)
		}
		if got := infoLines(logger, "inbox: middleware claims under its consumer"); len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(tt.start) {
			t.Errorf("%+v: start-up lines %v, want one with %v", tt.config, got, tt.start)
		}

		pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(mw)
		done := make(chan struct{}, 16)
		for handler := range tt.handlers {
			router.AddConsumerHandler(handler, "orders-"+handler, pubSub, func(*message.Message) error {
				done <- struct{}{}
				return nil
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = router.Run(ctx) }()
		<-router.Running()
		for handler := range tt.handlers {
			for i := range 3 {
				if err := pubSub.Publish("orders-"+handler, message.NewMessage(fmt.Sprintf("%s-%d", handler, i), nil)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 3 * len(tt.handlers) {
			<-done
		}
		cancel()
		_ = router.Close()

		logged := map[string]string{}
		for _, fields := range infoLines(logger, "inbox: router handler claims under its consumer") {
			handler := fields["handler_name"].(string)
			if _, twice := logged[handler]; twice {
				t.Errorf("%+v: handler %s logged more than once", tt.config, handler)
			}
			logged[handler] = fields["consumer"].(string)
		}
		if fmt.Sprint(logged) != fmt.Sprint(tt.handlers) {
			t.Errorf("%+v: handlers logged %v, want %v", tt.config, logged, tt.handlers)
		}
	}
}
