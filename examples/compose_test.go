package examples_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

// TestComposePublishesDefaults checks that `docker compose up` gives every example and test
// its default address: a service that publishes the port, with a health check.
func TestComposePublishesDefaults(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Ports       []yaml.Node `yaml:"ports"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}

	published := map[int]string{} // host port -> service
	for name, svc := range compose.Services {
		if svc.Healthcheck == nil || len(svc.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no health check", name)
		}
		for _, p := range svc.Ports {
			port, err := hostPort(p)
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			published[port] = name
		}
	}

	for service, addr := range demo.DefaultAddresses {
		port, err := portOf(addr)
		if err != nil {
			t.Errorf("%s default %q: %v", service, addr, err)
			continue
		}
		if name, ok := published[port]; ok {
			t.Logf("%s (%s) -> service %s", service, addr, name)
		} else {
			t.Errorf("no service publishes port %d for the %s default %q", port, service, addr)
		}
	}
}

// hostPort reads the host side of a compose port: "5432:5432", "127.0.0.1:5432:5432", or the
// long form {target: 5432, published: 5432}.
func hostPort(n yaml.Node) (int, error) {
	if n.Kind == yaml.MappingNode {
		var long struct {
			Published string `yaml:"published"`
		}
		if err := n.Decode(&long); err != nil {
			return 0, err
		}
		return strconv.Atoi(long.Published)
	}
	parts := strings.Split(n.Value, ":")
	if len(parts) < 2 {
		return 0, fmt.Errorf("port %q is not published on a fixed host port", n.Value)
	}
	return strconv.Atoi(parts[len(parts)-2])
}

var mysqlAddr = regexp.MustCompile(`tcp\(([^)]*)\)`)

// portOf finds the port in a URL, a host:port, or a go-sql-driver/mysql DSN.
func portOf(addr string) (int, error) {
	if m := mysqlAddr.FindStringSubmatch(addr); m != nil {
		addr = m[1]
	} else if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
