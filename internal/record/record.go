// Package record is the stored form of what a handler produced, as the inbox keeps it in its
// claim's row: the messages it returned to the router, those it published through an
// inbox.Publisher, each with the topic it goes to, and the response an entry point other than
// a router recorded (inboxhttp's). What is what is said by the record's structure alone: no
// field of a message (its metadata least of all, which a producer sets) is read to tell.
package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Message is a recorded message and the topic it is published to.
type Message struct {
	// Topic is the topic the message goes to: the one it was published to through an
	// inbox.Publisher, or, for a message returned to the router, the router handler's publish
	// topic when the handler ran ("" where the handler has none).
	Topic string
	Msg   *message.Message
}

// Record is what one claim recorded.
type Record struct {
	// Returned are the messages the handler returned, for the router to publish.
	Returned []Message
	// Published are the messages the handler published through an inbox.Publisher, which the
	// middleware publishes itself.
	Published []Message
	// Response is an entry point's own response (inboxhttp's), a JSON value that is stored as
	// it is and read back byte for byte; nil if none.
	Response json.RawMessage
}

// Messages is the number of messages the record holds for publishing.
func (r Record) Messages() int { return len(r.Returned) + len(r.Published) }

// empty reports whether there is nothing to record.
func (r Record) empty() bool { return r.Messages() == 0 && r.Response == nil }

// version lets a later release change the stored form. Version 4 added the topic of a returned
// message and the response; version 3 marked a response by a metadata key, which a producer
// could set, and is not read.
const version = 4

// wire is the stored form, JSON. Every field of a message is kept as bytes (base64 in JSON):
// encoding/json would replace invalid UTF-8 in a string with U+FFFD, and a UUID that comes back
// changed is republished as another message, which downstream inboxes do not recognise.
type wire struct {
	Version   int             `json:"v"`
	Messages  []wireMessage   `json:"messages,omitempty"`
	Published []wireMessage   `json:"published,omitempty"`
	Response  json.RawMessage `json:"response,omitempty"`
}

type wireMessage struct {
	Topic    []byte      `json:"topic,omitempty"`
	UUID     []byte      `json:"uuid"`
	Metadata [][2][]byte `json:"metadata,omitempty"` // key, value
	Payload  []byte      `json:"payload"`
}

// Encode returns the stored form of r; nil when r holds nothing.
func Encode(r Record) ([]byte, error) {
	if r.empty() {
		return nil, nil
	}
	w := wire{Version: version, Response: r.Response}
	for _, m := range r.Returned {
		w.Messages = append(w.Messages, encodeMessage(m))
	}
	for _, m := range r.Published {
		w.Published = append(w.Published, encodeMessage(m))
	}
	encoded, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode the record of produced messages: %w", err)
	}
	return encoded, nil
}

// LeastSize is a lower bound of the size of r encoded: the base64 of every topic, UUID,
// metadata field and payload, and the response, without the JSON around them. It lets a
// record far over a bound be refused without encoding it.
func LeastSize(r Record) int64 {
	var n int64
	field := func(length int) { n += int64(base64.StdEncoding.EncodedLen(length)) }
	for _, list := range [][]Message{r.Returned, r.Published} {
		for _, m := range list {
			field(len(m.Topic))
			field(len(m.Msg.UUID))
			field(len(m.Msg.Payload))
			for k, v := range m.Msg.Metadata {
				field(len(k))
				field(len(v))
			}
		}
	}
	return n + int64(len(r.Response))
}

// Decode reads what Encode wrote; an empty encoded is an empty record.
func Decode(encoded []byte) (Record, error) {
	if len(encoded) == 0 {
		return Record{}, nil
	}
	var w wire
	if err := json.Unmarshal(encoded, &w); err != nil {
		return Record{}, fmt.Errorf("decode the record of produced messages: %w", err)
	}
	if w.Version != version {
		return Record{}, fmt.Errorf("the record of produced messages has version %d, this release reads %d", w.Version, version)
	}
	r := Record{Response: w.Response}
	for _, m := range w.Messages {
		r.Returned = append(r.Returned, decodeMessage(m))
	}
	for _, m := range w.Published {
		r.Published = append(r.Published, decodeMessage(m))
	}
	return r, nil
}

func encodeMessage(m Message) wireMessage {
	w := wireMessage{UUID: []byte(m.Msg.UUID), Payload: m.Msg.Payload}
	if m.Topic != "" {
		w.Topic = []byte(m.Topic)
	}
	for k, v := range m.Msg.Metadata {
		w.Metadata = append(w.Metadata, [2][]byte{[]byte(k), []byte(v)})
	}
	return w
}

func decodeMessage(w wireMessage) Message {
	msg := message.NewMessage(string(w.UUID), w.Payload)
	for _, kv := range w.Metadata {
		msg.Metadata.Set(string(kv[0]), string(kv[1]))
	}
	return Message{Topic: string(w.Topic), Msg: msg}
}

// Pending reports whether encoded, as Encode wrote it, holds messages for publishing: what a
// store marks unpublished in the claim's commit. It reads the first bytes alone, which
// Encode writes in a fixed order ("v", then "messages" or "published" when there are any),
// so that a store tells it on the hot path without decoding the record.
func Pending(encoded []byte) bool {
	return bytes.HasPrefix(encoded, returnedPrefix) || bytes.HasPrefix(encoded, publishedPrefix)
}

var (
	returnedPrefix  = []byte(`{"v":` + strconv.Itoa(version) + `,"messages":`)
	publishedPrefix = []byte(`{"v":` + strconv.Itoa(version) + `,"published":`)
)
