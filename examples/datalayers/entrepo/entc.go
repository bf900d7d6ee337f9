//go:build ignore

// Generates entdb from schema: go generate ./examples/datalayers/entrepo/ (see generate.go).
package main

import (
	"log"

	"entgo.io/ent/entc"

	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entconfig"
)

func main() {
	if err := entc.Generate("./schema", entconfig.Config("./entdb")); err != nil {
		log.Fatal(err)
	}
}
