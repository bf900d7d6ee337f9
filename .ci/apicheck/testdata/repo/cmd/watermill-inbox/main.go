// Command watermill-inbox is the fixture's command-line tool, written as the real one is.
package main

import (
	"os"

	"example.com/lib/cmd/watermill-inbox/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
