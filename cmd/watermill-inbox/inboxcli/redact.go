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

// keywordPassword matches a password in a keyword/value DSN, where only white space ends an
// unquoted value (password=Sec&ret, password='a secret', sslpassword=secret), and
// urlQueryPassword one in a URL's query, where "&" and "#" end it too.
var (
	keywordPassword  = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)
	urlQueryPassword = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)([^&#\s]*)`)
)

// passwordParam returns the pattern of dsn's password parameters: a URL's query, or keyword/value.
func passwordParam(dsn string) *regexp.Regexp {
	if strings.Contains(dsn, "://") {
		return urlQueryPassword
	}
	return keywordPassword
}

// redactDSN returns dsn with its passwords replaced by xxxxx: a URL's or a MySQL DSN's
// userinfo (postgres://user:pw@host, mysql://user:pw@tcp(host)/db, user:pw@tcp(host)/db,
// whatever the password holds, "?", "@" and "/" among them: see userinfoPassword) and
// keyword/value or query ones (password=pw), and nothing else of it.
func redactDSN(dsn string) string {
	if start, end, ok := userinfoPassword(dsn); ok {
		dsn = dsn[:start] + redacted + dsn[end:]
	}
	return passwordParam(dsn).ReplaceAllString(dsn, "${1}"+redacted)
}

// userinfoPassword returns where the password of dsn's userinfo (user:password@) is. The
// userinfo ends at the last "@" before the last "/" (the database's), or at the last "@" if
// none comes before one, as go-sql-driver/mysql reads a DSN: a password may hold "?", "@" or
// "/" unencoded, and a driver that stops at the first of them (pgx's URL parser, at "?") then
// fails with the rest of the password in its error. The user ends at its first ":".
func userinfoPassword(dsn string) (start, end int, ok bool) {
	from := 0
	if i := strings.Index(dsn, "://"); i >= 0 {
		from = i + 3
	}
	rest := dsn[from:]
	if strings.ContainsAny(rest, " \t") && keywordPassword.MatchString(rest) && !strings.Contains(dsn, "://") {
		return 0, 0, false // keyword/value: host=... password=...
	}
	at := -1
	if slash := strings.LastIndexByte(rest, '/'); slash >= 0 {
		at = strings.LastIndexByte(rest[:slash], '@')
	}
	if at < 0 {
		at = strings.LastIndexByte(rest, '@')
	}
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
	for _, m := range passwordParam(dsn).FindAllStringSubmatch(dsn, -1) {
		raw = append(raw, strings.Trim(m[2], "'"))
	}
	var secrets []string
	for _, s := range raw {
		forms := []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("", s)}).User.String()[1:]}
		if decoded, err := url.PathUnescape(s); err == nil {
			forms = append(forms, decoded)
		}
		if decoded, err := url.QueryUnescape(s); err == nil {
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

// minBareSecret is the shortest password that redact replaces wherever it occurs in a line; a
// shorter one is replaced only where a DSN would hold it (after "user:" and before "@", after
// "password="), so that a one-letter password does not turn every such letter of the line
// into xxxxx, which would also tell the letter.
const minBareSecret = 4

// redact replaces in text every password dsn holds, and what a driver's partial redaction
// left of one (the part after its first "@"), by xxxxx.
func redact(text, dsn string) string {
	for _, s := range dsnSecrets(dsn) {
		if len(s) < minBareSecret {
			text = strings.ReplaceAll(text, ":"+s+"@", ":"+redacted+"@")
			text = regexp.MustCompile(`(?i)(password\s*=\s*'?)`+regexp.QuoteMeta(s)+`('|\s|&|$)`).ReplaceAllString(text, "${1}"+redacted+"${2}")
			continue
		}
		text = strings.ReplaceAll(text, s, redacted)
		if _, tail, found := strings.Cut(s, "@"); found && len(tail) >= minBareSecret {
			text = strings.ReplaceAll(text, tail, redacted)
		}
	}
	return text
}
