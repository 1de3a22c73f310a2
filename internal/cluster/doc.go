// Package cluster lets many gateway nodes share one view of each
// upstream's quota through a shared store (PostgreSQL or Redis): every
// node holds an expiring lease on a SHARE of each upstream's limits and of
// its max_concurrency, sized from its class-weighted demand, and the
// shares granted never sum above the whole. A RATE pause seen by one node
// is published and applied by all, and so are the limits learned from the
// provider's headers and its reported remaining (flow.ClusterReport: a
// remaining only lowers each node's share of it); one node at a time is the
// leader that runs the store's maintenance.
//
// The store is reached through Backend, which this package defines for
// its own needs; clustertest holds the conformance suite every Backend
// passes. Node runs the periodic sync and applies the grants to the
// members (the dispatchers). A lease is written by one process (its
// Identity: the node id and an Incarnation), so two processes under one
// node id are told apart: the younger takes a fresh id. See
// docs/cluster.md.
package cluster
