package linkhost

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/guestlink/guestlink/link/serialmux"
	"github.com/guestlink/guestlink/plugins/sdk/contract"
)

// serialOpenTimeout bounds connecting to a serial link's chardev socket.
const serialOpenTimeout = 10 * time.Second

// SerialTransport opens multiplexed sessions over a guest's serial link
// channel. The default is link/serialmux over QEMU's Unix-socket chardev.
type SerialTransport interface {
	// Open connects to the channel at path (contract.LinkEndpoint.Path) and
	// returns its session. The session lives until closed or the guest
	// goes away.
	Open(ctx context.Context, path string) (SerialSession, error)
}

// SerialSession is one guest's serial link: streams in both directions.
type SerialSession interface {
	// Accept returns the next stream the guest opened towards the daemon.
	Accept() (net.Conn, error)
	// Dial opens a stream to the guest's port (AgentPort).
	Dial(ctx context.Context, port uint32) (net.Conn, error)
	// Close ends the session and its streams.
	Close() error
}

// serialMux is the default SerialTransport: link/serialmux sessions that
// keep the streams for the daemon's link port and close the others (an
// agent still using a previous daemon's port).
type serialMux struct {
	port   uint32
	logger *slog.Logger
}

func (t serialMux) Open(ctx context.Context, path string) (SerialSession, error) {
	h, err := serialmux.DialHost(ctx, path)
	if err != nil {
		return nil, err
	}
	return &serialMuxSession{Host: h, port: t.port, logger: t.logger}, nil
}

type serialMuxSession struct {
	*serialmux.Host
	port   uint32
	logger *slog.Logger
}

// Accept returns the next stream for the daemon's port.
func (s *serialMuxSession) Accept() (net.Conn, error) {
	for {
		c, port, err := s.Host.Accept()
		if err != nil {
			return nil, err
		}
		if port == s.port {
			return c, nil
		}
		s.logger.Debug("linkhost: serial stream for another port", "port", port, "want", s.port)
		c.Close()
	}
}

// attachSerial opens the instance's serial session (within
// serialOpenTimeout) and accepts the guest's streams on it.
func (h *Host) attachSerial(a *attachment) error {
	ctx, cancel := context.WithTimeout(context.Background(), serialOpenTimeout)
	s, err := h.cfg.Serial.Open(ctx, a.ep.Path)
	cancel()
	if err != nil {
		return fmt.Errorf("attaching serial link of instance %s: %w", a.uuid, err)
	}
	a.session = s
	h.wg.Add(1)
	go h.acceptFrom(a, s.Accept, Identity{InstanceUUID: a.uuid, Link: contract.LinkSerial})
	return nil
}

var (
	_ SerialSession   = (*serialMuxSession)(nil)
	_ SerialTransport = serialMux{}
)
