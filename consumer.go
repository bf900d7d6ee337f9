package inbox

import (
	"fmt"
	"maps"
)

// consumer returns the consumer a message that arrives through the router handler named
// handler is claimed under: Config.Consumer, or ConsumerFromHandler's name for the handler.
func (c Config) consumer(handler string) (string, error) {
	if c.Consumer != "" {
		return c.Consumer, nil
	}
	if handler == "" {
		return "", fmt.Errorf("%w: the message came through no router handler, so Config.ConsumerFromHandler has no name to map", ErrNoConsumer)
	}
	name := c.ConsumerFromHandler(handler)
	if name == "" {
		return "", fmt.Errorf("%w: Config.ConsumerFromHandler gives none for router handler %q "+
			"(a renamed handler? map its new name to the consumer it had)", ErrNoConsumer, handler)
	}
	if err := validateConsumer(name); err != nil {
		return "", err
	}
	return name, nil
}

// ConsumerByHandler returns a Config.ConsumerFromHandler that looks up the router handler's
// name in consumers (handler name to consumer name), for one middleware on a router whose
// handlers are of different consumers. A handler that is not in the map gets no consumer:
// its messages fail with an error wrapping ErrNoConsumer, before any claim or effect, and
// are nacked. Write the map out rather than building it from the handlers' names: renaming
// a handler then means adding its new name with the consumer it had, and a handler renamed
// without that is refused instead of processing its messages again under a new consumer.
//
// Handlers that compete for one queue map to one consumer; handlers that each must see every
// message, each on its own queue, map to their own:
//
//	inbox.ConsumerByHandler(map[string]string{
//		"billing-0": "billing", "billing-1": "billing", // competing: one queue, one consumer
//		"audit":     "audit",                          // fan-out: its own queue and consumer
//	})
//
// The map is copied: changing it afterwards changes nothing.
func ConsumerByHandler(consumers map[string]string) func(handlerName string) string {
	consumers = maps.Clone(consumers)
	return func(handlerName string) string { return consumers[handlerName] }
}

func validateConsumer(name string) error {
	if len(name) > MaxConsumerLength {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidConsumer, len(name), MaxConsumerLength)
	}
	if reason := invalidText(name); reason != "" {
		return fmt.Errorf("%w: %s", ErrInvalidConsumer, reason)
	}
	return nil
}
