package inbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// What a handler produced is recorded with its claim, so that a redelivery can publish it
// again. Two kinds of messages are recorded:
//
//   - the messages the handler returns: the router publishes them only after the middleware
//     has committed, and a publish that fails nacks the incoming message, whose redelivery
//     is then a duplicate. The middleware returns the recorded messages for every duplicate,
//     and the router publishes them again;
//   - the messages the handler publishes through a Publisher: the middleware publishes them
//     after the commit, and again for every duplicate.
//
// Either way they keep their original UUIDs, so consumers downstream deduplicate them.

// producedRecord is the stored form. v lets a later version change it.
type producedRecord struct {
	Version   int                `json:"v"`
	Messages  []producedMessage  `json:"messages,omitempty"`
	Published []publishedMessage `json:"published,omitempty"`
}

// producedMessage keeps every field as bytes (base64 in JSON): encoding/json would replace
// invalid UTF-8 in a string with U+FFFD, and a UUID that comes back changed is republished
// as another message, which downstream inboxes do not recognise.
type producedMessage struct {
	UUID     []byte      `json:"uuid"`
	Metadata [][2][]byte `json:"metadata,omitempty"` // key, value
	Payload  []byte      `json:"payload"`
}

type publishedMessage struct {
	Topic   []byte          `json:"topic"`
	Message producedMessage `json:"message"`
}

// published is a message a handler published through a [Publisher], kept until the commit.
type published struct {
	topic string
	msg   *message.Message
}

const producedVersion = 3

// encodeProduced returns nil when there is nothing to record, and an error wrapping
// [ErrRecordTooLarge] for a record of more than limit bytes. A record that is far too large
// (a payload of 100 MB) is refused before it is encoded, by the encoded size of its fields
// alone, so that refusing it allocates nothing of its size; one near the limit is refused
// by its exact size, after encoding.
func encodeProduced(returned []*message.Message, pubs []published, limit int64) ([]byte, error) {
	if len(returned) == 0 && len(pubs) == 0 {
		return nil, nil
	}
	if least := leastEncodedSize(returned, pubs); least > limit {
		return nil, recordTooLarge(fmt.Sprintf("more than %d bytes", least), len(returned)+len(pubs), limit)
	}
	record := producedRecord{Version: producedVersion, Messages: make([]producedMessage, len(returned))}
	for i, msg := range returned {
		record.Messages[i] = encodeMessage(msg)
	}
	for _, p := range pubs {
		record.Published = append(record.Published, publishedMessage{Topic: []byte(p.topic), Message: encodeMessage(p.msg)})
	}
	encoded, err := json.Marshal(record)
	if err != nil {
		return nil, fmt.Errorf("inbox: encode produced messages: %w", err)
	}
	if int64(len(encoded)) > limit {
		return nil, recordTooLarge(fmt.Sprintf("%d bytes", len(encoded)), len(returned)+len(pubs), limit)
	}
	return encoded, nil
}

func recordTooLarge(size string, messages int, limit int64) error {
	return fmt.Errorf("%w: the record of the %d message(s) the handler returned or published is %s, Config.MaxRecorded is %d: "+
		"make the handler produce less (a reference to a large payload stored elsewhere, not the payload) or raise "+
		"MaxRecorded (and, on MySQL, max_allowed_packet), then send the message again", ErrRecordTooLarge, messages, size, limit)
}

// leastEncodedSize is a lower bound of the size of the encoded record: the base64 of every
// UUID, topic, metadata field and payload, without the JSON around them.
func leastEncodedSize(returned []*message.Message, pubs []published) int64 {
	var n int64
	field := func(length int) { n += int64(base64.StdEncoding.EncodedLen(length)) }
	msg := func(m *message.Message) {
		field(len(m.UUID))
		field(len(m.Payload))
		for k, v := range m.Metadata {
			field(len(k))
			field(len(v))
		}
	}
	for _, m := range returned {
		msg(m)
	}
	for _, p := range pubs {
		field(len(p.topic))
		msg(p.msg)
	}
	return n
}

func encodeMessage(msg *message.Message) producedMessage {
	m := producedMessage{UUID: []byte(msg.UUID), Payload: msg.Payload}
	for k, v := range msg.Metadata {
		m.Metadata = append(m.Metadata, [2][]byte{[]byte(k), []byte(v)})
	}
	return m
}

func decodeProduced(encoded []byte) (returned []*message.Message, pubs []published, err error) {
	if len(encoded) == 0 {
		return nil, nil, nil
	}
	var record producedRecord
	if err := json.Unmarshal(encoded, &record); err != nil {
		return nil, nil, fmt.Errorf("inbox: decode recorded produced messages: %w", err)
	}
	if record.Version != producedVersion {
		return nil, nil, fmt.Errorf("inbox: recorded produced messages have version %d, this version reads %d",
			record.Version, producedVersion)
	}
	for _, m := range record.Messages {
		returned = append(returned, decodeMessage(m))
	}
	for _, p := range record.Published {
		pubs = append(pubs, published{topic: string(p.Topic), msg: decodeMessage(p.Message)})
	}
	return returned, pubs, nil
}

func decodeMessage(m producedMessage) *message.Message {
	msg := message.NewMessage(string(m.UUID), m.Payload)
	for _, kv := range m.Metadata {
		msg.Metadata.Set(string(kv[0]), string(kv[1]))
	}
	return msg
}
