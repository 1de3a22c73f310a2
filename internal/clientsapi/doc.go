// Package clientsapi is the admin API's clients routes (docs/http-api.md,
// /v1/clients): create, list, read, change, rotate and revoke the runtime
// clients (package clients) kept in the job store. The server mounts them
// (API.Register) and authenticates the caller; the API answers admin keys
// only, in the jobs API's error shape, each answer with its
// X-Sluice-Request-Id; every change is logged with the admin's name,
// counted in sluice_client_admin_actions_total, and applied on this node
// at once (clients.Poller.Load), on the others within their clients_poll.
//
// The config file's clients are listed beside the runtime ones but are
// read-only here (409 config-managed); the API imports neither the server
// nor the engine.
package clientsapi
