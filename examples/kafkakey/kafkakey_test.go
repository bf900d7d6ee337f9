package kafkakey_test

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/kafkakey"
)

// The keys of consumed records are tested against a Kafka cluster in examples/kafka; these
// are the cases that need none.
func TestOffsetKeyWithoutKafkaContext(t *testing.T) {
	msg := message.NewMessage("", []byte("{}"))
	if _, err := kafkakey.OffsetKey(msg); !errors.Is(err, kafkakey.ErrNoOffset) {
		t.Errorf("OffsetKey: err = %v, want ErrNoOffset", err)
	}
	if _, err := kafkakey.UUIDOrOffsetKey(msg); !errors.Is(err, kafkakey.ErrNoOffset) {
		t.Errorf("UUIDOrOffsetKey without a UUID: err = %v, want ErrNoOffset", err)
	}
	msg.UUID = "3f0c5a8e-6c1b-4a43-9a4e-0f7f1d1f3e10"
	if key, err := kafkakey.UUIDOrOffsetKey(msg); err != nil || key != msg.UUID {
		t.Errorf("UUIDOrOffsetKey with a UUID = %q, %v; want the UUID", key, err)
	}
}
