// Command schemagen writes the JSON Schema of the gateway's config file
// (server.ConfigSchema) to -out; `go generate ./internal/server/` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/internal/server"
)

func main() {
	out := flag.String("out", "docs/sluice.schema.json", "file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	b, err := server.ConfigSchema(root)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// moduleRoot is the nearest directory above the working one with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
