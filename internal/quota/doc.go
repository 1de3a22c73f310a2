// Package quota keeps clients' spend budgets: a Ledger reserves a
// request's worst-case cost before it is sent and settles the reservation
// with the actual cost after, so that concurrent requests racing for a
// client's last dollars are refused rather than overspending.
//
// A budget has three windows, each optional: the UTC calendar day, the UTC
// calendar month and the total (never resets). A reservation fits when,
// in every window with a limit, spent + reserved + the request's worst
// case stays within the limit. The invariant: the spend settled in a
// window exceeds its limit by no more than what settled requests cost
// beyond their reservation (nothing, when the worst case is a bound), so
// racing requests never overspend; with a worst case that is only an
// estimate, by at most one request's excess each.
//
// Spend is charged to the windows current when the request settles;
// reservations still in flight at midnight carry over into the new day.
// Every method takes now and the Ledger reads no clock: tests move time
// by hand. A Ledger is safe for concurrent use; its methods are O(1) under
// one mutex.
package quota
