// Command printschema writes the GraphQL schema the service serves, as one
// SDL file without code-generation directives (graph.PrintSchema), to
// graph/schema.graphql or the file given with -o. `make generate` runs it
// after gqlgen; `make test` fails when the committed file is stale.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/voucherd/voucherd/graph"
)

func main() {
	out := flag.String("o", graph.SchemaFile, "output file")
	flag.Parse()
	if err := os.WriteFile(*out, graph.PrintSchema(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "printschema:", err)
		os.Exit(1)
	}
}
