package inbox

import (
	"maps"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
)

// A consumer set by accident (from the host name, a pod name, an environment variable that
// differs between deployments) runs every copy that reaches another process again, and
// nothing fails: the only trace would be the claims. So each middleware says at info level,
// once, what it claims under: at construction, and when a router handler first sends it a
// message.

// logConsumers logs the consumer, or the handler-to-consumer map, that [NewMiddleware] was
// given.
func (m *middleware) logConsumers() {
	fields := watermill.LogFields{"write_behind": m.config.WriteBehind}
	if m.config.Consumer != "" {
		fields["consumer"] = m.config.Consumer
	} else {
		var pairs []string
		for _, handler := range slices.Sorted(maps.Keys(m.config.ConsumerByHandler)) {
			pairs = append(pairs, handler+"="+m.config.ConsumerByHandler[handler])
		}
		fields["consumer_by_handler"] = strings.Join(pairs, ",")
	}
	m.logger.Info("inbox: middleware claims under its consumer", fields)
}

// logHandlerOnce logs, the first time a router handler's message reaches the middleware,
// the consumer its messages are claimed under.
func (m *middleware) logHandlerOnce(handler, consumer string) {
	if _, seen := m.handlers.LoadOrStore(handler, struct{}{}); seen {
		return
	}
	m.logger.Info("inbox: router handler claims under its consumer", watermill.LogFields{"handler_name": handler, "consumer": consumer})
}
