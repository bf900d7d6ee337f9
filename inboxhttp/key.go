package inboxhttp

import (
	"errors"
	"fmt"
	"strings"

	inbox "github.com/inboxkit/watermill-inbox"
)

// errNoKey is the error for a request without the key header.
var errNoKey = errors.New("inboxhttp: the request has no Idempotency-Key")

// parseKey reads the key from the values of the Idempotency-Key header, a Structured Field
// Item whose bare item is a String (RFC 8941): "key", with \" and \\ its only escapes and
// printable ASCII its only characters, optionally followed by parameters, which are parsed
// and ignored. Several header lines make a list, which is not an Item: an error.
func parseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", fmt.Errorf("inboxhttp: %d Idempotency-Key header lines, want one", len(values))
	}
	p := &sfParser{s: strings.TrimLeft(values[0], " ")}
	key, err := p.string()
	if err != nil {
		return "", err
	}
	if err := p.parameters(); err != nil {
		return "", err
	}
	if rest := strings.TrimRight(p.s[p.i:], " "); rest != "" {
		return "", fmt.Errorf("inboxhttp: Idempotency-Key: unexpected %q after the key", rest)
	}
	switch {
	case key == "":
		return "", errors.New("inboxhttp: Idempotency-Key is an empty string")
	case len(key) > inbox.MaxKeyLength:
		return "", fmt.Errorf("inboxhttp: Idempotency-Key of %d bytes, the limit is %d", len(key), inbox.MaxKeyLength)
	}
	return key, nil
}

// sfParser parses the parts of RFC 8941 an Idempotency-Key needs.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() (byte, bool) {
	if p.i >= len(p.s) {
		return 0, false
	}
	return p.s[p.i], true
}

// string parses an sf-string (RFC 8941, 4.2.5).
func (p *sfParser) string() (string, error) {
	if c, ok := p.peek(); !ok || c != '"' {
		return "", errors.New(`inboxhttp: Idempotency-Key is not a quoted string: send it as "key" (RFC 8941)`)
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			next, ok := p.peek()
			if !ok || (next != '"' && next != '\\') {
				return "", errors.New(`inboxhttp: Idempotency-Key: a backslash escapes only " and \`)
			}
			b.WriteByte(next)
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("inboxhttp: Idempotency-Key: byte 0x%02x is not printable ASCII", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("inboxhttp: Idempotency-Key: the string has no closing quote")
}

// parameters parses and drops sf parameters: *( ";" *SP key [ "=" bare-item ] ).
func (p *sfParser) parameters() error {
	for {
		if c, ok := p.peek(); !ok || c != ';' {
			return nil
		}
		p.i++
		for c, ok := p.peek(); ok && c == ' '; c, ok = p.peek() {
			p.i++
		}
		if err := p.key(); err != nil {
			return err
		}
		if c, ok := p.peek(); ok && c == '=' {
			p.i++
			if err := p.bareItem(); err != nil {
				return err
			}
		}
	}
}

// key parses an sf key: lcalpha or "*", then lcalpha, DIGIT, "_", "-", ".", "*".
func (p *sfParser) key() error {
	c, ok := p.peek()
	if !ok || !(c >= 'a' && c <= 'z' || c == '*') {
		return errors.New("inboxhttp: Idempotency-Key: a parameter's name must start with a lowercase letter or *")
	}
	for ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
		p.i++
		c, ok = p.peek()
	}
	return nil
}

// bareItem parses a parameter's value: a string, a token, a number or a boolean.
func (p *sfParser) bareItem() error {
	c, ok := p.peek()
	switch {
	case !ok:
		return errors.New("inboxhttp: Idempotency-Key: a parameter has = but no value")
	case c == '"':
		_, err := p.string()
		return err
	case c == '?':
		p.i++
		if c, ok := p.peek(); ok && (c == '0' || c == '1') {
			p.i++
			return nil
		}
		return errors.New("inboxhttp: Idempotency-Key: a boolean is ?0 or ?1")
	case c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		p.i++
		for c, ok := p.peek(); ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0); c, ok = p.peek() {
			p.i++
		}
		return nil
	}
	return fmt.Errorf("inboxhttp: Idempotency-Key: a parameter's value cannot start with %q", c)
}

// quoteKey writes key as an sf-string, for the header a client sends.
func quoteKey(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}
