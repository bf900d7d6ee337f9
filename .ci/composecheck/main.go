// Command composecheck does, on a machine without Docker, what "docker compose config" does
// with docker-compose.yml: it loads the file with compose-go, the Compose Specification's
// loader that Docker Compose v2 is built on, which validates it against the specification's
// schema. Then it checks what the file promises its users: every published port binds
// 127.0.0.1 only (the services trust every client), and every service has a health check.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	path := "docker-compose.yml"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if err := check(path); err != nil {
		fmt.Fprintf(os.Stderr, "composecheck: %s: %v\n", path, err)
		os.Exit(1)
	}
}

func check(path string) error {
	options, err := cli.NewProjectOptions([]string{path}, cli.WithName("watermill-inbox"))
	if err != nil {
		return err
	}
	project, err := cli.ProjectFromOptions(context.Background(), options)
	if err != nil {
		return err
	}
	var problems []error
	ports := 0
	names := project.ServiceNames()
	slices.Sort(names)
	for _, name := range names {
		service := project.Services[name]
		for _, port := range service.Ports {
			ports++
			if port.HostIP != "127.0.0.1" {
				problems = append(problems, fmt.Errorf("service %s publishes port %s on %q, not 127.0.0.1", name, port.Published, port.HostIP))
			}
		}
		if service.HealthCheck == nil || service.HealthCheck.Disable {
			problems = append(problems, fmt.Errorf("service %s has no health check", name))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	fmt.Printf("%s: valid (compose-go %s); %d services %v, %d published ports, all on 127.0.0.1; every service has a health check\n",
		path, loaderVersion(), len(names), names, ports)
	return nil
}

func loaderVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/compose-spec/compose-go/v2" {
				return dep.Version
			}
		}
	}
	return "unknown version"
}
