package simvm

import (
	"encoding/json"
	"time"
)

// ProtocolVersion is the version of the control protocol announced in the
// greeting.
const ProtocolVersion = 1

// Control protocol commands, in the spirit of QMP.
const (
	// CmdStatus returns a Status.
	CmdStatus = "status"
	// CmdCont starts the guest command of a VMM that waits for it (a VMM
	// starts paused, like "qemu -S", so no event is missed) and returns a
	// Status.
	CmdCont = "cont"
	// CmdRingbufRead consumes and returns up to RingbufReadArgs.Size bytes
	// of the ring buffer as RingbufReadReturn.
	CmdRingbufRead = "ringbuf-read"
	// CmdPowerdown sends SIGTERM to the guest's process group (an ACPI
	// power button press).
	CmdPowerdown = "powerdown"
	// CmdQuit kills the guest's process group with SIGKILL; the VMM then
	// records the exit and ends.
	CmdQuit = "quit"
	// CmdSystemReset kills the guest's process group and starts the guest
	// command again (a reboot); the VMM emits EventReset.
	CmdSystemReset = "system_reset"
	// CmdSubscribe makes the connection receive every event from now on.
	CmdSubscribe = "subscribe"
)

// Control protocol events.
const (
	EventRingData = "RING_DATA" // the guest wrote to the wired port (data: RingData)
	EventReset    = "RESET"     // the guest command was restarted (data: Status)
	EventExited   = "EXITED"    // the guest ended; the VMM exits next (data: ExitRecord)
	// EventPortChange: the guest opened the wired port, or closed it after
	// writing (data: PortChange); QEMU's VSERPORT_CHANGE, not rate-limited.
	EventPortChange = "PORT_CHANGE"
)

// Error classes of the control protocol.
const (
	ClassCommandNotFound = "CommandNotFound"
	ClassInvalidArgument = "InvalidArgument"
	ClassWrongState      = "WrongState"
	ClassGenericError    = "GenericError"
)

// Greeting is the first line a VMM sends on every control connection.
type Greeting struct {
	SIM struct {
		Version int    `json:"version"`
		VMMPID  int    `json:"vmm_pid"`
		UUID    string `json:"uuid"`
	} `json:"SIM"`
}

// Request is one command line sent to a VMM.
type Request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        json.RawMessage `json:"id,omitempty"`
}

// Response is the VMM's answer to a Request: Return or Error.
type Response struct {
	Return json.RawMessage `json:"return,omitempty"`
	Error  *ErrorBody      `json:"error,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
}

// ErrorBody is a failed command's error.
type ErrorBody struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

// Timestamp is an event's time in QMP form.
type Timestamp struct {
	Seconds      int64 `json:"seconds"`
	Microseconds int64 `json:"microseconds"`
}

// Time returns ts as a time.Time.
func (ts Timestamp) Time() time.Time {
	return time.Unix(ts.Seconds, ts.Microseconds*1000)
}

func timestampOf(t time.Time) Timestamp {
	return Timestamp{Seconds: t.Unix(), Microseconds: int64(t.Nanosecond() / 1000)}
}

// Event is an asynchronous message to subscribed connections.
type Event struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data,omitempty"`
	Timestamp Timestamp       `json:"timestamp"`
}

// VMM states reported in Status.State.
const (
	StatePaused   = "paused"   // waiting for cont
	StateRunning  = "running"  // the guest command runs
	StateShutdown = "shutdown" // the guest ended; the VMM is exiting
)

// Status is the answer to CmdStatus and CmdCont.
type Status struct {
	State    string `json:"state"`
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	VMMPID   int    `json:"vmm_pid"`
	GuestPID int    `json:"guest_pid"`
	Boot     int    `json:"boot"` // guest command starts so far
	Layout   Layout `json:"layout"`
	RingPort string `json:"ring_port"`
	RingSize int    `json:"ring_size"`
	// RingReceived counts the bytes the guest wrote to the wired port since
	// the VMM started (read or not, dropped or not).
	RingReceived uint64    `json:"ring_received"`
	StartedAt    time.Time `json:"started_at"`
}

// RingbufReadArgs are the arguments of CmdRingbufRead.
type RingbufReadArgs struct {
	Size int `json:"size"`
}

// RingbufReadReturn is the answer to CmdRingbufRead (data is base64 on the
// wire, so any byte survives).
type RingbufReadReturn struct {
	Data []byte `json:"data"`
}

// RingData is the data of EventRingData.
type RingData struct {
	Port  string `json:"port"`
	Bytes int    `json:"bytes"`
}
