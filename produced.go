package inbox

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The messages a handler returns are recorded with its claim, so that a redelivery can
// return them again: the router publishes a handler's messages only after the middleware
// has committed, and a publish that fails nacks the incoming message, whose redelivery is
// then a duplicate. Returning the recorded messages, with their original UUIDs, makes the
// router publish them again; consumers downstream deduplicate them by UUID.

// producedRecord is the stored form. v lets a later version change it.
type producedRecord struct {
	Version  int               `json:"v"`
	Messages []producedMessage `json:"messages"`
}

// producedMessage keeps every field as bytes (base64 in JSON): encoding/json would replace
// invalid UTF-8 in a string with U+FFFD, and a UUID that comes back changed is republished
// as another message, which downstream inboxes do not recognise.
type producedMessage struct {
	UUID     []byte      `json:"uuid"`
	Metadata [][2][]byte `json:"metadata,omitempty"` // key, value
	Payload  []byte      `json:"payload"`
}

const producedVersion = 2

// encodeProduced returns nil when there is nothing to record.
func encodeProduced(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	record := producedRecord{Version: producedVersion, Messages: make([]producedMessage, len(msgs))}
	for i, msg := range msgs {
		m := producedMessage{UUID: []byte(msg.UUID), Payload: msg.Payload}
		for k, v := range msg.Metadata {
			m.Metadata = append(m.Metadata, [2][]byte{[]byte(k), []byte(v)})
		}
		record.Messages[i] = m
	}
	encoded, err := json.Marshal(record)
	if err != nil {
		return nil, fmt.Errorf("inbox: encode produced messages: %w", err)
	}
	return encoded, nil
}

func decodeProduced(encoded []byte) ([]*message.Message, error) {
	if len(encoded) == 0 {
		return nil, nil
	}
	var record producedRecord
	if err := json.Unmarshal(encoded, &record); err != nil {
		return nil, fmt.Errorf("inbox: decode recorded produced messages: %w", err)
	}
	if record.Version != producedVersion {
		return nil, fmt.Errorf("inbox: recorded produced messages have version %d, this version reads %d",
			record.Version, producedVersion)
	}
	msgs := make([]*message.Message, len(record.Messages))
	for i, m := range record.Messages {
		msgs[i] = message.NewMessage(string(m.UUID), m.Payload)
		for _, kv := range m.Metadata {
			msgs[i].Metadata.Set(string(kv[0]), string(kv[1]))
		}
	}
	return msgs, nil
}
