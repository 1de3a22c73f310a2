package main

import (
	"cmp"
	"flag"
	"os"
)

// gatewayFlags are the flags of every command that talks to a running
// gateway: --server (env SLUICE_SERVER) and --key (env SLUICE_KEY;
// --api-key and SLUICE_API_KEY are accepted as older spellings).
type gatewayFlags struct {
	server *string
	key    *string
	oldKey *string
}

// addGatewayFlags registers --server and --key on fs.
func addGatewayFlags(fs *flag.FlagSet) *gatewayFlags {
	return &gatewayFlags{
		server: fs.String("server", cmp.Or(os.Getenv("SLUICE_SERVER"), serverDefault), "gateway `URL` (env SLUICE_SERVER)"),
		// No default shown: -h must not print the key from the environment.
		key:    fs.String("key", "", "client `key` for the gateway (default $SLUICE_KEY)"),
		oldKey: fs.String("api-key", "", "same as --key (older spelling)"),
	}
}

// Key is the client key: --key, --api-key, $SLUICE_KEY, $SLUICE_API_KEY.
func (g *gatewayFlags) Key() string {
	return cmp.Or(*g.key, *g.oldKey, os.Getenv("SLUICE_KEY"), os.Getenv("SLUICE_API_KEY"))
}

// client returns an API client for the flags' gateway.
func (g *gatewayFlags) client() (*apiClient, error) { return newAPIClient(*g.server, g.Key()) }
