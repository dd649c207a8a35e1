// Command openapigen writes rest/openapi.json from rest/openapi.yaml and the
// REST route table (rest/openapi); `make generate` runs it from the
// module root. It fails, naming each problem, when the document and the
// routes are out of step.
package main

import (
	"log"
	"os"

	"github.com/voucherd/voucherd/rest"
	"github.com/voucherd/voucherd/rest/openapi"
)

func main() {
	src, err := os.ReadFile(openapi.SourcePath)
	if err != nil {
		log.Fatal(err)
	}
	out, err := openapi.Generate(src, rest.Routes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(openapi.OutputPath, out, 0o644); err != nil {
		log.Fatal(err)
	}
}
