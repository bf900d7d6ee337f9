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

type producedMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload"`
}

// encodeProduced returns nil when there is nothing to record.
func encodeProduced(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	record := producedRecord{Version: 1, Messages: make([]producedMessage, len(msgs))}
	for i, msg := range msgs {
		record.Messages[i] = producedMessage{UUID: msg.UUID, Metadata: msg.Metadata, Payload: msg.Payload}
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
	if record.Version != 1 {
		return nil, fmt.Errorf("inbox: recorded produced messages have version %d, this version reads 1", record.Version)
	}
	msgs := make([]*message.Message, len(record.Messages))
	for i, m := range record.Messages {
		msgs[i] = message.NewMessage(m.UUID, m.Payload)
		for k, v := range m.Metadata {
			msgs[i].Metadata.Set(k, v)
		}
	}
	return msgs, nil
}
