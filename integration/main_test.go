package integration

import (
	"os"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestMain stops the Galera cluster that the tests of this package share, once they ran.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopSharedGalera()
	os.Exit(code)
}
