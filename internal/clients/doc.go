// Package clients is who may call the gateway: the config file's clients
// (Config: name, keys, role, classes, and the admission layer's limits,
// budget and service tiers, which package admit enforces), the runtime
// clients created through the admin API and kept in the job store (Spec,
// Runtime, NewKey), and the Set a route authenticates a key with.
//
// Keys are held only as SHA-256 digests and compared in constant time
// (Set). A key the admin API issues starts with KeyPrefix; the store keeps
// its digest and first characters, never the key.
//
// The merge rule: the config's clients come first; a name the config
// uses cannot be created, changed or revoked through the API (409
// config-managed), and a runtime client whose name a reloaded config takes
// is shadowed by the config's. A gateway without clients in its config
// is open (every caller an admin) and ignores runtime clients. The
// Registry holds both lists and applies the rule on every change; every
// gateway on the store polls its clients version (Poller, every
// clients_poll) and applies a change at once, so every node serves the
// same clients.
//
// The package knows nothing of HTTP: the server reads the key from the
// request's headers, and the admin API (internal/clientsapi) writes the
// runtime clients to the store.
package clients
