//go:build inbox_writebehind

package main

import (
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

func init() {
	writeBehind = func(store inbox.Store) (message.HandlerMiddleware, error) {
		return inbox.NewMiddleware(store, inbox.Config{Consumer: benchConsumer, WriteBehind: true}, nil)
	}
}
