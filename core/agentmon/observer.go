package agentmon

// RingObserver is told of the monitor's ring reads (Config.RingObserver),
// per backend: never per instance, so that what it counts stays bounded.
// Its methods are called on monitor goroutines and must be cheap.
type RingObserver interface {
	// RingRead reports a read of n bytes holding lines complete lines
	// that the guest's budget admitted (they are parsed).
	RingRead(backend string, n, lines int)
	// RingDropped reports a read of n bytes over the guest's ring budget,
	// dropped unparsed (reads then pause; see Config.RingBytesPerSecond).
	RingDropped(backend string, n int)
}

// noRingObserver observes nothing.
type noRingObserver struct{}

func (noRingObserver) RingRead(string, int, int) {}
func (noRingObserver) RingDropped(string, int)   {}
