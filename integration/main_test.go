package integration

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// serverBoundParallel is how many of this package's parallel tests run at once unless
// -test.parallel says otherwise. Go's default is one per CPU, which suits tests that compute;
// these mostly wait on servers (a failover, a node rejoining, a database down for 5 s), and on
// 2 cores one per CPU left the machine half idle for most of the package's run. A fuzz run
// keeps Go's default, for which -test.parallel counts fuzzing processes.
const serverBoundParallel = 4

// TestMain runs more parallel tests at once than Go's default (serverBoundParallel), and stops
// the Galera cluster that the tests of this package share, once they ran.
func TestMain(m *testing.M) {
	flag.Parse()
	if !flagSet("test.parallel") && !flagSet("test.fuzz") {
		if err := flag.Set("test.parallel", strconv.Itoa(serverBoundParallel)); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	testenv.StopSharedGalera()
	os.Exit(code)
}

// flagSet reports whether the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
