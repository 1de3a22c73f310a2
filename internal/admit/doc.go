// Package admit is the admission layer: the rules that decide whether a
// caller may send a request at all, built once for every door (the
// proxy's live requests, the job worker, `sluice batch run`, the SDK batch
// and Responses routes) rather than in the first door that needed them.
//
// It owns the clients' own limits on each upstream (a per-(client,
// upstream) Gate with its requests and tokens per minute and its
// concurrency slots, which the upstream's dispatcher checks in its
// admission step, so a request over its client's limit waits in the
// upstream's one queue, visible like any other wait), the spend budgets
// (a ledger of each client's day, month and total windows: the worst case
// reserved before sending, and written to the store before the request is
// sent, the actual cost settled after, so a crash loses none of it), their
// shares on a cluster, and the fallback router (which
// upstream serves a request when its own is unavailable or cannot make
// the deadline).
//
// Every door makes the same calls, decided by the same rules: a live
// request calls Layer.Do (its client's limit is waited for in the engine's
// queue, its fallback chosen by the router, its spend settled when the
// answer ends); the job worker asks Layer.RouteJobs where a class's next
// jobs go (their upstream or a fallback, and a fallback for the jobs whose
// deadline the upstream's predicted wait would miss), a job's call then
// Layer.AdmitNow, which answers at once (a *HeldError says when to come back,
// and the job waits in the store without burning an attempt), and settles
// the Admission when the call has ended; a call whose attempt failed in an
// outage asks Layer.Reroute and is made again at once on the fallback. A budget refusal (a *RefusalError) is
// answered at once, never after waiting for a rate slot.
package admit
