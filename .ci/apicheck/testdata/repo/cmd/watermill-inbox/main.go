// Command watermill-inbox is the fixture's command-line tool, written as the real one is.
package main

import (
	"flag"
	"os"
	"time"
)

const dsnVar = "FIXTURE_DSN"

const (
	exitOK    = 0
	exitUsage = 2
)

type command struct{ fs *flag.FlagSet }

func newCommand(name string) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.String("dsn", "", "database")
	return c
}

func cleanupCommand(args []string) error {
	c := newCommand("cleanup")
	c.fs.Duration("pause", 2*time.Second, "wait between batches")
	c.fs.Int("batch-size", 100, "rows per batch")
	return c.fs.Parse(args)
}

func statsCommand(args []string) error {
	c := newCommand("stats")
	return c.fs.Parse(args)
}

func main() {
	if cleanupCommand(os.Args[1:]) != nil || statsCommand(os.Args[1:]) != nil {
		os.Exit(exitUsage)
	}
	os.Exit(exitOK)
}
