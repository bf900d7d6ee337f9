package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The example programs find their services where the tests do: a flag's default is one of
// demo's addresses that read the INBOX_TEST_* variables, never a fixed default that
// ignores them.
func TestExamplesReadTheTestVariables(t *testing.T) {
	fixed := regexp.MustCompile(`flag\.\w+\([^\n]*demo\.Default(PostgresURL|AMQPURL|NATSURL|RedisAddr)\b`)
	mains, err := filepath.Glob("*/main.go")
	if err != nil || len(mains) < 8 {
		t.Fatalf("found %d example programs (%v)", len(mains), err)
	}
	for _, main := range mains {
		src, err := os.ReadFile(main)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fixed.FindAllStringSubmatch(string(src), -1) {
			t.Errorf("%s: a flag defaults to demo.Default%s, which ignores the INBOX_TEST_* variable; use demo.%s", main, m[1], m[1])
		}
	}
}
