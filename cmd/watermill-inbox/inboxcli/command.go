package inboxcli

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// command is what every command starts from: a flag set with the target's flags (-dsn,
// -dialect, -table), to which the command adds its own.
type command struct {
	name string
	fs   *flag.FlagSet
	cli  *cli
	target
}

// newCommand returns a command whose flag set prints nothing itself: a bad flag is one line
// on stderr (from run), -h prints the flags (parse).
func (x *cli) newCommand(name string) *command {
	c := &command{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError), cli: x}
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	c.fs.StringVar(&c.dsn, "dsn", "", "database `DSN`: postgres://..., mysql://user:pass@tcp(host:3306)/db, sqlite://path or file:path (default $"+dsnVar+")")
	c.fs.StringVar(&c.dialectName, "dialect", "", "SQL `dialect`: "+x.dialects.names()+" (default: from the DSN's scheme)")
	c.fs.StringVar(&c.table, "table", sqlinbox.DefaultTable, "inbox `table`, optionally schema-qualified")
	return c
}

// parse parses args; -h prints the flags on stderr.
func (c *command) parse(args []string, stderr io.Writer) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: watermill-inbox %s [flags]\n", c.name)
			c.fs.SetOutput(stderr)
			c.fs.PrintDefaults()
			return err
		}
		return usagef("%s: %w", c.name, err)
	}
	if c.fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", c.name, c.fs.Arg(0))
	}
	return nil
}
