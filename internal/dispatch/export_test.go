package dispatch

// LoopIdle reports whether d's admission loop has acted on everything it
// was told: it is waiting, with no wake-up pending and its timer (if any)
// not yet due on the clock. With every caller blocked where a test can see
// it, the engine then does nothing until the clock moves.
func LoopIdle(d *Dispatcher) bool {
	d.park.Lock()
	defer d.park.Unlock()
	return d.park.parked && d.park.handled == d.kicks.Load() &&
		(d.park.until.IsZero() || d.clk.Now().Before(d.park.until))
}
