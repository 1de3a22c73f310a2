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
		key:    fs.String("key", cmp.Or(os.Getenv("SLUICE_KEY"), os.Getenv("SLUICE_API_KEY")), "client `key` for the gateway (env SLUICE_KEY)"),
		oldKey: fs.String("api-key", "", "same as --key (older spelling)"),
	}
}

// Key is the client key given, --key first.
func (g *gatewayFlags) Key() string { return cmp.Or(*g.oldKey, *g.key) }

// client returns an API client for the flags' gateway.
func (g *gatewayFlags) client() (*apiClient, error) { return newAPIClient(*g.server, g.Key()) }
