package examples_test

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// kafkaDefault is the example programs' default Kafka address, Kafka's usual port: the
// tests run Kafka in-process, so internal/testenv has none.
const kafkaDefault = "127.0.0.1:9092"

// defaultAddresses lists, by service, the default address of every service the tests and
// the example programs use (TestExamplesReadTheTestVariables checks the programs').
var defaultAddresses = map[string]string{
	"PostgreSQL": testenv.DefaultPostgresURL,
	"MariaDB":    testenv.DefaultMySQLDSN,
	"RabbitMQ":   testenv.DefaultAMQPURL,
	"NATS":       testenv.DefaultNATSURL,
	"Redis":      testenv.DefaultRedisAddr,
	"Kafka":      kafkaDefault,
}

// TestComposePublishesDefaults checks that `docker compose up` gives every example and test
// its default address: a service that publishes the port, on 127.0.0.1 only (the services
// trust every client), with a health check.
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
		} else if check := strings.Join(svc.Healthcheck.Test, " "); !tcpCheck.MatchString(check) {
			// An image's init phase runs a temporary server on a Unix socket only: a check
			// through the socket can pass before the real server listens.
			t.Errorf("service %s: health check %q does not connect over TCP", name, check)
		}
		for _, p := range svc.Ports {
			ip, port, err := hostPort(p)
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			if ip != "127.0.0.1" {
				t.Errorf("service %s publishes port %d on %q, want 127.0.0.1 only", name, port, cmp.Or(ip, "every interface"))
			}
			published[port] = name
		}
	}

	for service, addr := range defaultAddresses {
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

// hostPort reads the host side of a compose port, its address ("" for every interface) and
// port: "5432:5432", "127.0.0.1:5432:5432", or the long form {target: 5432, published: 5432,
// host_ip: 127.0.0.1}.
func hostPort(n yaml.Node) (ip string, port int, err error) {
	if n.Kind == yaml.MappingNode {
		var long struct {
			Published string `yaml:"published"`
			HostIP    string `yaml:"host_ip"`
		}
		if err := n.Decode(&long); err != nil {
			return "", 0, err
		}
		port, err := strconv.Atoi(long.Published)
		return long.HostIP, port, err
	}
	parts := strings.Split(strings.TrimSuffix(n.Value, "/tcp"), ":")
	if len(parts) < 2 {
		return "", 0, fmt.Errorf("port %q is not published on a fixed host port", n.Value)
	}
	if len(parts) > 2 {
		ip = strings.Join(parts[:len(parts)-2], ":")
	}
	port, err = strconv.Atoi(parts[len(parts)-2])
	return ip, port, err
}

// tcpCheck matches a health check that connects to the service over TCP: to 127.0.0.1, or
// with MariaDB's --connect or RabbitMQ's check_port_connectivity.
var tcpCheck = regexp.MustCompile(`127\.0\.0\.1|healthcheck\.sh --connect|check_port_connectivity`)

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
