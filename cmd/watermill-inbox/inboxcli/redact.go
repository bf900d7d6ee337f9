package inboxcli

import (
	"net/url"
	"regexp"
	"strings"
)

// The command prints a DSN, or a driver's error that holds one, only without its password:
// a driver's own redaction is not enough (pgx up to v5.12 masked a URL password only up to
// its first "@", so alice:p@ssS3cret@host printed as alice:xxxxx@ssS3cret@host).

const redacted = "xxxxx"

// keywordPassword matches a password in a keyword/value DSN or a URL's query:
// password=secret, password='a secret', sslpassword=secret.
var keywordPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)

// redactDSN returns dsn with its passwords replaced by xxxxx: a URL's (postgres://user:pw@host,
// mysql://user:pw@tcp(host)/db, whatever the password holds: the userinfo ends at the last
// "@" before the query, as drivers read it) and keyword/value ones (password=pw).
func redactDSN(dsn string) string {
	if start, end, ok := userinfoPassword(dsn); ok {
		dsn = dsn[:start] + redacted + dsn[end:]
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}"+redacted)
}

// userinfoPassword returns where the password of dsn's userinfo (user:password@) is.
func userinfoPassword(dsn string) (start, end int, ok bool) {
	from := 0
	if i := strings.Index(dsn, "://"); i >= 0 {
		from = i + 3
	}
	rest := dsn[from:]
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	return from + colon + 1, from + at, true
}

// dsnSecrets returns the passwords dsn holds, as written and as a driver may print them
// (decoded, or encoded again), for redact.
func dsnSecrets(dsn string) []string {
	var raw []string
	if start, end, ok := userinfoPassword(dsn); ok {
		raw = append(raw, dsn[start:end])
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		raw = append(raw, strings.Trim(m[2], "'"))
	}
	var secrets []string
	for _, s := range raw {
		forms := []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("", s)}).User.String()[1:]}
		if decoded, err := url.PathUnescape(s); err == nil {
			forms = append(forms, decoded)
		}
		for _, f := range forms {
			if f != "" && f != redacted {
				secrets = append(secrets, f)
			}
		}
	}
	return secrets
}

// redact replaces in text every password dsn holds, and what a driver's partial redaction
// left of one (the part after its first "@"), by xxxxx.
func redact(text, dsn string) string {
	for _, s := range dsnSecrets(dsn) {
		text = strings.ReplaceAll(text, s, redacted)
		if _, tail, found := strings.Cut(s, "@"); found && len(tail) >= 4 {
			text = strings.ReplaceAll(text, tail, redacted)
		}
	}
	return text
}
