package sdk

import (
	"time"

	backendv1 "github.com/guestlink/guestlink/plugins/sdk/proto/backend/v1"
)

// This file converts between the contract types of this package and their
// protobuf forms. Every conversion accepts nil and unknown enum values, so a
// malformed message never panics either side.

func infoToProto(i *Info) *backendv1.InfoResponse {
	if i == nil {
		return &backendv1.InfoResponse{}
	}
	caps := make([]string, len(i.Capabilities))
	for n, c := range i.Capabilities {
		caps[n] = string(c)
	}
	var missing []*backendv1.Missing
	for _, m := range i.Missing {
		missing = append(missing, &backendv1.Missing{What: m.What, Reason: m.Reason, Package: m.Package})
	}
	var schema []*backendv1.ConfigKey
	for _, k := range i.ConfigSchema {
		schema = append(schema, &backendv1.ConfigKey{Name: k.Name, Type: string(k.Type), DefaultValue: k.Default, Doc: k.Doc})
	}
	return &backendv1.InfoResponse{
		ConfigSchema:   schema,
		Name:           i.Name,
		Version:        i.Version,
		Capabilities:   caps,
		ConfigPrefixes: append([]string(nil), i.ConfigPrefixes...),
		InstanceType:   i.InstanceType,
		Missing:        missing,
	}
}

func infoFromProto(p *backendv1.InfoResponse) *Info {
	i := &Info{
		Name:           p.GetName(),
		Version:        p.GetVersion(),
		ConfigPrefixes: append([]string(nil), p.GetConfigPrefixes()...),
		InstanceType:   p.GetInstanceType(),
	}
	for _, c := range p.GetCapabilities() {
		i.Capabilities = append(i.Capabilities, Capability(c))
	}
	for _, m := range p.GetMissing() {
		i.Missing = append(i.Missing, Missing{What: m.GetWhat(), Reason: m.GetReason(), Package: m.GetPackage()})
	}
	for _, k := range p.GetConfigSchema() {
		i.ConfigSchema = append(i.ConfigSchema, ConfigKey{Name: k.GetName(), Type: ConfigType(k.GetType()), Default: k.GetDefaultValue(), Doc: k.GetDoc()})
	}
	return i
}

func specToProto(s *GuestSpec) *backendv1.GuestSpec {
	if s == nil {
		return nil
	}
	p := &backendv1.GuestSpec{
		Name:         s.Name,
		Uuid:         s.UUID,
		Config:       copyMap(s.Config),
		RestoreState: s.RestoreState,
	}
	if im := s.Image; im != nil {
		p.Image = &backendv1.Image{Fingerprint: im.Fingerprint, Path: im.Path, Format: im.Format, Kernel: im.Kernel, Initrd: im.Initrd}
	}
	if len(s.Devices) > 0 {
		p.Devices = make(map[string]*backendv1.Device, len(s.Devices))
		for name, d := range s.Devices {
			p.Devices[name] = &backendv1.Device{Config: copyMap(d)}
		}
	}
	for _, f := range s.Files {
		p.Files = append(p.Files, &backendv1.File{Path: f.Path, Mode: f.Mode, Data: f.Data})
	}
	return p
}

func specFromProto(p *backendv1.GuestSpec) *GuestSpec {
	s := &GuestSpec{
		Name:         p.GetName(),
		UUID:         p.GetUuid(),
		Config:       copyMap(p.GetConfig()),
		RestoreState: p.GetRestoreState(),
	}
	if im := p.GetImage(); im != nil {
		s.Image = &Image{Fingerprint: im.GetFingerprint(), Path: im.GetPath(), Format: im.GetFormat(), Kernel: im.GetKernel(), Initrd: im.GetInitrd()}
	}
	if s.Config == nil {
		s.Config = map[string]string{}
	}
	s.Devices = make(map[string]Device, len(p.GetDevices()))
	for name, d := range p.GetDevices() {
		dev := Device(copyMap(d.GetConfig()))
		if dev == nil {
			dev = Device{}
		}
		s.Devices[name] = dev
	}
	for _, f := range p.GetFiles() {
		if f == nil {
			continue
		}
		s.Files = append(s.Files, File{Path: f.GetPath(), Mode: f.GetMode(), Data: f.GetData()})
	}
	return s
}

func statusToProto(s Status) backendv1.Status {
	switch s {
	case StatusStopped:
		return backendv1.Status_STATUS_STOPPED
	case StatusRunning:
		return backendv1.Status_STATUS_RUNNING
	case StatusError:
		return backendv1.Status_STATUS_ERROR
	}
	return backendv1.Status_STATUS_UNSPECIFIED
}

func statusFromProto(s backendv1.Status) Status {
	switch s {
	case backendv1.Status_STATUS_STOPPED:
		return StatusStopped
	case backendv1.Status_STATUS_RUNNING:
		return StatusRunning
	case backendv1.Status_STATUS_ERROR:
		return StatusError
	}
	return StatusUnknown
}

func stateToProto(s *GuestState) *backendv1.GuestState {
	if s == nil {
		return nil
	}
	return &backendv1.GuestState{
		Status:        statusToProto(s.Status),
		Pid:           s.PID,
		Message:       s.Message,
		Details:       copyMap(s.Details),
		HasSavedState: s.HasSavedState,
	}
}

// stateFromProto never returns nil: a missing state reads as StatusUnknown.
func stateFromProto(p *backendv1.GuestState) *GuestState {
	return &GuestState{
		Status:        statusFromProto(p.GetStatus()),
		PID:           p.GetPid(),
		Message:       p.GetMessage(),
		Details:       copyMap(p.GetDetails()),
		HasSavedState: p.GetHasSavedState(),
	}
}

var eventKinds = [...]struct {
	sdk   EventKind
	proto backendv1.EventKind
}{
	{EventExited, backendv1.EventKind_EVENT_KIND_EXITED},
	{EventReset, backendv1.EventKind_EVENT_KIND_RESET},
	{EventPortOpened, backendv1.EventKind_EVENT_KIND_PORT_OPENED},
	{EventPortClosed, backendv1.EventKind_EVENT_KIND_PORT_CLOSED},
	{EventRingData, backendv1.EventKind_EVENT_KIND_RING_DATA},
	{EventError, backendv1.EventKind_EVENT_KIND_ERROR},
}

// exitKinds maps exit kinds to the wire; an unknown one is unspecified.
var exitKinds = []struct {
	sdk   ExitKind
	proto backendv1.ExitKind
}{
	{ExitPoweroff, backendv1.ExitKind_EXIT_KIND_POWEROFF},
	{ExitCrash, backendv1.ExitKind_EXIT_KIND_CRASH},
}

func eventToProto(e Event) *backendv1.Event {
	p := &backendv1.Event{Uuid: e.UUID, Port: e.Port, Detail: e.Detail, Ring: e.Ring, RingSeq: e.RingSeq, Heartbeat: e.Heartbeat}
	for _, k := range exitKinds {
		if k.sdk == e.Exit {
			p.Exit = k.proto
		}
	}
	for _, k := range eventKinds {
		if k.sdk == e.Kind {
			p.Kind = k.proto
		}
	}
	if !e.Time.IsZero() {
		p.TimeUnixNano = e.Time.UnixNano()
	}
	return p
}

func eventFromProto(p *backendv1.Event) Event {
	e := Event{UUID: p.GetUuid(), Port: p.GetPort(), Detail: p.GetDetail(), Ring: p.GetRing(), RingSeq: p.GetRingSeq(), Heartbeat: p.GetHeartbeat()}
	for _, k := range exitKinds {
		if k.proto == p.GetExit() {
			e.Exit = k.sdk
		}
	}
	for _, k := range eventKinds {
		if k.proto == p.GetKind() {
			e.Kind = k.sdk
		}
	}
	if ns := p.GetTimeUnixNano(); ns != 0 {
		e.Time = time.Unix(0, ns)
	}
	return e
}

func endpointToProto(e *LinkEndpoint) *backendv1.LinkEndpointResponse {
	if e == nil {
		return &backendv1.LinkEndpointResponse{}
	}
	return &backendv1.LinkEndpointResponse{Kind: string(e.Kind), Path: e.Path, Cid: e.CID}
}

func endpointFromProto(p *backendv1.LinkEndpointResponse) *LinkEndpoint {
	return &LinkEndpoint{Kind: LinkKind(p.GetKind()), Path: p.GetPath(), CID: p.GetCid()}
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func snapshotInfoToProto(i *SnapshotInfo) *backendv1.SnapshotInfo {
	if i == nil {
		return &backendv1.SnapshotInfo{}
	}
	return &backendv1.SnapshotInfo{DiskBytes: i.DiskBytes, StateBytes: i.StateBytes, Details: copyMap(i.Details)}
}

func snapshotInfoFromProto(p *backendv1.SnapshotInfo) *SnapshotInfo {
	return &SnapshotInfo{DiskBytes: p.GetDiskBytes(), StateBytes: p.GetStateBytes(), Details: copyMap(p.GetDetails())}
}
