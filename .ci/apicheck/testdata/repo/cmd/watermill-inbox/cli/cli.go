// Package cli is the fixture's command-line tool as a package, written as the real one is:
// the commands are methods that call newCommand.
package cli

import (
	"flag"
	"time"
)

const dsnVar = "FIXTURE_DSN"

const (
	exitOK    = 0
	exitUsage = 2
)

type tool struct{}

type command struct{ fs *flag.FlagSet }

func (tool) newCommand(name string) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.String("dsn", "", "database")
	return c
}

func (x tool) cleanupCommand(args []string) error {
	c := x.newCommand("cleanup")
	c.fs.Duration("pause", 2*time.Second, "wait between batches")
	c.fs.Int("batch-size", 100, "rows per batch")
	return c.fs.Parse(args)
}

func (x tool) statsCommand(args []string) error {
	c := x.newCommand("stats")
	return c.fs.Parse(args)
}

// Main runs the tool and returns its exit status.
func Main(args []string) int {
	var x tool
	if x.cleanupCommand(args) != nil || x.statsCommand(args) != nil {
		return exitUsage
	}
	return exitOK
}

// Usage returns the usage of a command.
func Usage(command string) string { return "usage: watermill-inbox " + command }
