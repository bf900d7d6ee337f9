// Package kafkakey gives the inbox an idempotency key for Kafka records that carry no
// Watermill UUID: records written by producers outside Watermill.
//
// Watermill's Kafka marshaler sends the message UUID in the header _watermill_message_uuid.
// A record without it arrives with an empty UUID, and the inbox's default key fails such a
// message with inbox.ErrInvalidKey (a nack, never a silent skip). For a topic whose producers
// send no UUID, opt in to OffsetKey:
//
//	inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", Key: kafkakey.OffsetKey}, logger)
//
// A record's place in its topic (topic, partition, offset) never changes, so every
// redelivery of a record gets the same key: a consumer group member that dies before it
// commits, a rebalance, a nack. What the key cannot see is a producer that sends the same
// event twice: the copies are two records at two offsets. Deduplicating those needs an ID in
// the payload or a header, and a Key function that reads it.
package kafkakey

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrNoOffset is returned by OffsetKey for a message that did not come from a
// watermill-kafka subscriber in a router handler: its context has no topic, partition or
// offset.
var ErrNoOffset = errors.New("kafkakey: message context has no Kafka topic, partition or offset")

// OffsetKey returns "kafka:<topic>/<partition>/<offset>" for a message consumed through a
// watermill-kafka subscriber in a message.Router handler. The topic comes from
// message.SubscribeTopicFromCtx, the partition and offset from kafka.MessagePartitionFromCtx
// and kafka.MessagePartitionOffsetFromCtx.
//
// A topic name longer than about 220 bytes makes the key longer than inbox.MaxKeyLength,
// and the inbox rejects it with inbox.ErrInvalidKey.
func OffsetKey(msg *message.Message) (string, error) {
	ctx := msg.Context()
	topic := message.SubscribeTopicFromCtx(ctx)
	partition, okPartition := kafka.MessagePartitionFromCtx(ctx)
	offset, okOffset := kafka.MessagePartitionOffsetFromCtx(ctx)
	if topic == "" || !okPartition || !okOffset {
		return "", ErrNoOffset
	}
	return fmt.Sprintf("kafka:%s/%d/%d", topic, partition, offset), nil
}

// UUIDOrOffsetKey returns the message UUID when the record has one, and OffsetKey's key
// when it has none: for a topic written both by Watermill producers (whose retries share a
// UUID) and by producers outside Watermill. The two kinds of key cannot collide: a UUID
// never starts with "kafka:".
func UUIDOrOffsetKey(msg *message.Message) (string, error) {
	if msg.UUID != "" {
		return msg.UUID, nil
	}
	return OffsetKey(msg)
}
