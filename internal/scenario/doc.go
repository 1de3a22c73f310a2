// Package scenario measures Sluice against the hand-written alternative
// (the demo, `sluice demo`, and the benchmarks, `sluice bench`). It
// runs the mock provider (package mock) and the gateway (package server) in
// process on loopback, sends a generated workload through the gateway, and
// sends the same workload with a naive client (a concurrency limit plus
// jittered retries that honour retry-after) straight to a fresh mock with
// identical settings, then prints both side by side.
//
// The pieces:
//
//   - Workload and Generate: a reproducible list of requests (class mix,
//     sizes, streaming share, Poisson arrival times) and their bodies;
//   - Naive: the baseline client;
//   - Percentile and Summarize: latency statistics;
//   - IdealDrain: the shortest time a token-bucket provider can serve a
//     workload in, the yardstick of the goodput scenario;
//   - Scenarios (goodput, priority, outage, overhead, mock; Lookup finds
//     one by name) and Demo, each returning a Result that Result.WriteText
//     or WriteJSON prints.
//
// Benchmarks measure wall time on the real clock: they are experiments, not
// tests, and their figures depend on the machine. Statistics and workload
// generation are pure and tested on their own.
package scenario
