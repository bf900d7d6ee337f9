package inbox

import "github.com/ThreeDotsLabs/watermill/message"

// markPublished tells a [PublishedMarker] store that the committed record of this delivery
// has left, once it has: at once when the middleware published all of it itself (what the
// handler sent through a [Publisher]), or when the router acks the message, which it does
// after publishing what the handler returned. A nack means the router's publish failed (or
// a middleware after the inbox failed): the record stays unpublished, for the redelivery or
// the relay. pending says whether the record held messages at all.
func (d *delivery) markPublished(returned []*message.Message, pending bool) {
	marker, ok := d.m.store.(PublishedMarker)
	if !ok || !pending {
		return
	}
	claim := d.claim
	if len(returned) == 0 {
		marker.MarkPublished(claim)
		return
	}
	acked, nacked := d.msg.Acked(), d.msg.Nacked()
	go func() {
		select {
		case <-acked:
			marker.MarkPublished(claim)
		case <-nacked:
		}
	}()
}
