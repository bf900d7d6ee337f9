package inboxcli

import (
	"strconv"
	"strings"
	"time"
)

// parseAge reads a retention: a Go duration ("72h", "90m") or whole days ("14d").
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, usagef("bad -older-than %q: want a positive number of days (14d) or a duration (336h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usagef("bad -older-than %q: want a positive duration (336h) or days (14d)", s)
	}
	return d, nil
}
