// compose-check validates Compose files as `docker compose config` does, without a Docker
// engine: it loads them with compose-go (the library Docker Compose v2 is built on), which
// checks them against the Compose Specification's schema and resolves services, depends_on,
// profiles, volumes and variables. CI runs it on deploy/compose.yaml.
//
//	go run ./deploy/compose-check deploy/compose.yaml
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-check FILE...")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions(
		os.Args[1:],
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithProfiles([]string{"*"}),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s: valid (project %s, services:", os.Args[1], project.Name)
	for _, name := range project.ServiceNames() {
		fmt.Printf(" %s", name)
	}
	fmt.Println(")")
}
