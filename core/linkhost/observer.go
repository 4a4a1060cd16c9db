package linkhost

// ConnObserver is told of the guest link connections the host accepts
// (Config.Observer): link is the link kind ("vsock", "hybrid", "serial"),
// admitted false for a connection closed at once because its instance
// holds Config.MaxConnsPerInstance already. LinkConn is called on the
// accepting goroutine, before the connection is handed on or closed, and
// must be cheap.
type ConnObserver interface {
	LinkConn(link string, admitted bool)
}

// noConnObserver observes nothing.
type noConnObserver struct{}

func (noConnObserver) LinkConn(string, bool) {}
