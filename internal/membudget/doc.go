// Package membudget is the gateway's memory budget: how much memory the
// process may use (the cgroup's limit or the machine's, SystemMemory), the
// Go runtime's soft limit sluice serve sets from it (DefaultMemoryLimit),
// and the limit of request-body bytes in flight that keeps large bodies
// from exhausting it (Bytes, whose default is DefaultRequestBytes).
//
// Bytes is a counting semaphore on the injected clock: a reservation waits
// up to its configured wait for room, then fails with ErrFull; a small
// reservation may be forced through (the caller decides what is small).
// It knows nothing of HTTP: the server reserves a request's bytes before
// reading its body and renders ErrFull in the provider's error shape.
package membudget
