package inbox

import "fmt"

// consumer returns the consumer a message that arrives through the router handler named
// handler is claimed under: [Config.Consumer], or ConsumerByHandler's name for the handler.
func (c Config) consumer(handler string) (string, error) {
	if c.Consumer != "" {
		return c.Consumer, nil
	}
	if handler == "" {
		return "", fmt.Errorf("%w: the message came through no router handler, so Config.ConsumerByHandler has no name to look up", ErrNoConsumer)
	}
	name, ok := c.ConsumerByHandler[handler]
	if !ok {
		return "", fmt.Errorf("%w: Config.ConsumerByHandler names none for router handler %q "+
			"(a renamed handler? map its new name to the consumer it had)", ErrNoConsumer, handler)
	}
	return name, nil
}

// validateConsumers checks every consumer name the [Config] can claim under, at construction.
func (c Config) validateConsumers() error {
	if c.Consumer != "" {
		return validateConsumer(c.Consumer)
	}
	for handler, name := range c.ConsumerByHandler {
		if name == "" {
			return fmt.Errorf("inbox: Config.ConsumerByHandler maps router handler %q to no consumer", handler)
		}
		if err := validateConsumer(name); err != nil {
			return fmt.Errorf("%w (router handler %q)", err, handler)
		}
	}
	return nil
}

func validateConsumer(name string) error {
	if len(name) > MaxConsumerLength {
		return fmt.Errorf("inbox: consumer name of %d bytes, the limit is %d", len(name), MaxConsumerLength)
	}
	if reason := invalidText(name); reason != "" {
		return fmt.Errorf("inbox: consumer name %q: %s", name, reason)
	}
	return nil
}
