package outsidedialect_test

import (
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
)

// The store conformance suite, in both modes, on a store of each dialect of one's own.
func TestConformance(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Run("claim-first", func(t *testing.T) { inboxtest.Run(t, d.harness, nil) })
			t.Run("write-behind", func(t *testing.T) {
				inboxtest.Run(t, d.harness, &inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
			})
		})
	}
}
