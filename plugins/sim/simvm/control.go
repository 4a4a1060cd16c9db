package simvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk/eventer"
)

// conn is one control connection.
type conn struct {
	nc      net.Conn
	wmu     sync.Mutex
	events  *eventer.Queue[Event]
	drained chan struct{} // closed when the event writer is done
}

func (c *conn) write(msg any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(drainTimeout))
	_, err = c.nc.Write(data)
	return err
}

func (v *vmm) acceptLoop() {
	for {
		nc, err := v.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{nc: nc}
		v.mu.Lock()
		v.connsOpen[c] = struct{}{}
		v.conns.Add(1)
		v.mu.Unlock()
		go v.serve(c)
	}
}

func (v *vmm) serve(c *conn) {
	defer v.conns.Done()
	defer func() {
		v.mu.Lock()
		delete(v.connsOpen, c)
		if _, ok := v.subs[c]; ok {
			delete(v.subs, c)
			c.events.Close()
		}
		v.mu.Unlock()
		c.nc.Close()
	}()
	var g Greeting
	g.SIM.Version, g.SIM.VMMPID, g.SIM.UUID = ProtocolVersion, os.Getpid(), v.cfg.UUID
	if c.write(g) != nil {
		return
	}
	sc := bufio.NewScanner(c.nc)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = &ErrorBody{Class: ClassInvalidArgument, Desc: fmt.Sprintf("decoding command: %v", err)}
		} else {
			resp = v.execute(c, &req)
			resp.ID = req.ID
		}
		if c.write(resp) != nil {
			return
		}
	}
}

// execute runs one command.
func (v *vmm) execute(c *conn, req *Request) Response {
	ok := func(ret any) Response {
		raw, err := json.Marshal(ret)
		if err != nil {
			return Response{Error: &ErrorBody{Class: ClassGenericError, Desc: err.Error()}}
		}
		return Response{Return: raw}
	}
	fail := func(class, format string, args ...any) Response {
		return Response{Error: &ErrorBody{Class: class, Desc: fmt.Sprintf(format, args...)}}
	}
	switch req.Execute {
	case CmdStatus:
		v.mu.Lock()
		defer v.mu.Unlock()
		return ok(v.statusLocked())
	case CmdCont:
		first := false
		v.contOnce.Do(func() { first = true; close(v.contReq) })
		if !first {
			return fail(ClassWrongState, "guest already started")
		}
		select {
		case res := <-v.contDone:
			if res.err != nil {
				return fail(ClassGenericError, "%v", res.err)
			}
			// The status as the guest started: a guest that ends at once
			// still answers cont with its running state.
			return ok(res.st)
		case <-v.quitReq:
			return fail(ClassWrongState, "vmm is quitting")
		}
	case CmdRingbufRead:
		var args RingbufReadArgs
		if len(req.Arguments) > 0 {
			if err := json.Unmarshal(req.Arguments, &args); err != nil {
				return fail(ClassInvalidArgument, "decoding %s arguments: %v", req.Execute, err)
			}
		}
		if args.Size <= 0 {
			return fail(ClassInvalidArgument, "size must be greater than zero, got %d", args.Size)
		}
		return ok(RingbufReadReturn{Data: v.ring.Read(args.Size)})
	case CmdPowerdown:
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.state != StateRunning {
			return fail(ClassWrongState, "guest is %s", v.state)
		}
		v.powerdown = true
		if err := syscall.Kill(-v.guestPID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fail(ClassGenericError, "signalling guest: %v", err)
		}
		return ok(struct{}{})
	case CmdQuit:
		v.quit("quit requested")
		return ok(struct{}{})
	case CmdSystemReset:
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.state != StateRunning {
			return fail(ClassWrongState, "guest is %s", v.state)
		}
		v.resetReq = true
		v.powerdown = false
		if err := syscall.Kill(-v.guestPID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fail(ClassGenericError, "signalling guest: %v", err)
		}
		return ok(struct{}{})
	case CmdSubscribe:
		v.mu.Lock()
		defer v.mu.Unlock()
		if c.events == nil {
			c.events = eventer.NewQueue[Event]()
			c.drained = make(chan struct{})
			v.subs[c] = struct{}{}
			go c.writeEvents()
		}
		return ok(struct{}{})
	}
	return fail(ClassCommandNotFound, "the command %q has not been found", req.Execute)
}

// writeEvents sends queued events until the queue is closed.
func (c *conn) writeEvents() {
	defer close(c.drained)
	broken := false
	for {
		ev, ok := c.events.Pop(context.Background())
		if !ok {
			return
		}
		// Once the peer is gone, keep consuming (and discarding) until the
		// connection's reader closes the queue.
		if !broken && c.write(ev) != nil {
			broken = true
			c.nc.Close()
		}
	}
}
