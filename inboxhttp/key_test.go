package inboxhttp

import (
	"strings"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		header []string
		want   string // "" refuses
	}{
		{[]string{`"order-1"`}, "order-1"},
		{[]string{`  "order-1"  `}, "order-1"},
		{[]string{`"a \"quoted\" key \\ here"`}, `a "quoted" key \ here`},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324";v=1;exp=?1`}, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{[]string{`"k"; a="b"; c=tok/en`}, "k"},
		{nil, ""},
		{[]string{`order-1`}, ""},         // a token, not a string
		{[]string{`""`}, ""},              // empty
		{[]string{`"a", "b"`}, ""},        // a list
		{[]string{`"a"`, `"b"`}, ""},      // two lines: a list
		{[]string{`"a\nb"`}, ""},          // an escape RFC 8941 has not
		{[]string{"\"a\tb\""}, ""},        // a control character
		{[]string{"\"caf\xc3\xa9\""}, ""}, // not ASCII
		{[]string{`"open`}, ""},           // no closing quote
		{[]string{`"k";A=1`}, ""},         // a parameter name is lowercase
		{[]string{`"k";a=`}, ""},          // a parameter without its value
		{[]string{`"k" junk`}, ""},        // something after the item
		{[]string{`"` + strings.Repeat("k", inbox.MaxKeyLength+1) + `"`}, ""},
		{[]string{`"` + strings.Repeat("k", inbox.MaxKeyLength) + `"`}, strings.Repeat("k", inbox.MaxKeyLength)},
	} {
		got, err := parseKey(tc.header)
		if tc.want == "" && err == nil {
			t.Errorf("parseKey(%q) = %q, want it refused", tc.header, got)
		}
		if tc.want != "" && (err != nil || got != tc.want) {
			t.Errorf("parseKey(%q) = %q, %v; want %q", tc.header, got, err, tc.want)
		}
	}
}

// Whatever a client sends, a key parseKey accepts is printable ASCII of the table's length,
// and quoting it again gives a header that parses to the same key.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{`"order-1"`, `"a\"b\\c";x=1`, `tok`, `"`, `"a";b=?0;c="d"`, "\"\x7f\"", ``} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := parseKey([]string{header})
		if err != nil {
			return
		}
		if key == "" || len(key) > inbox.MaxKeyLength {
			t.Fatalf("parseKey(%q) = %q: empty or too long", header, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("parseKey(%q) = %q: byte 0x%02x", header, key, key[i])
			}
		}
		again, err := parseKey([]string{quoteKey(key)})
		if err != nil || again != key {
			t.Fatalf("parseKey(quoteKey(%q)) = %q, %v", key, again, err)
		}
	})
}
