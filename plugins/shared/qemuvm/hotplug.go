package qemuvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/guestlink/guestlink/plugins/sdk"
	"github.com/guestlink/guestlink/plugins/shared/qmp"
)

// Hot-plug slots: PCIe root ports made at start (q35's root complex does
// not take hot-plugged devices), each taking one hot-plugged disk.
const (
	hotplugPorts    = 8
	hotplugPortAddr = 0x10 // first slot on pcie.0
	devicePrefix    = "gl-"
	unplugTimeout   = 3 * time.Minute // the guest acknowledges an unplug (a booting TCG guest is slow)
	unplugRetry     = 5 * time.Second // a request the guest missed is sent again
)

// hotplugPortID names hot-plug port i.
func hotplugPortID(i int) string { return fmt.Sprintf("glhp%d", i) }

// hotplugPortArgs are the QEMU arguments of the hot-plug ports.
func hotplugPortArgs() []string {
	var a []string
	for i := range hotplugPorts {
		a = append(a, "-device", fmt.Sprintf("pcie-root-port,id=%s,bus=pcie.0,addr=0x%x,chassis=%d,port=%d",
			hotplugPortID(i), hotplugPortAddr+i, 10+i, 10+i))
	}
	return a
}

// coldDisk is a disk device present at start.
type coldDisk struct {
	name, path string
	readonly   bool
}

// coldDisks returns the disk devices of a spec that have a volume file, by
// name, at most one per hot-plug port (the others are left out and logged
// by Start's caller through the error of a later hot-plug).
func coldDisks(devs map[string]sdk.Device) []coldDisk {
	var out []coldDisk
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		if d["type"] != "disk" || d[sdk.KeyVolumePath] == "" || len(out) == hotplugPorts {
			continue
		}
		out = append(out, coldDisk{name: name, path: d[sdk.KeyVolumePath], readonly: isTrue(d["readonly"])})
	}
	return out
}

// coldDiskArgs are the QEMU arguments of the disks present at start: the
// same block nodes and devices a hot-plug makes, on the first ports, so
// they can be unplugged later and a saved state finds them again.
func coldDiskArgs(disks []coldDisk) []string {
	var a []string
	for i, d := range disks {
		id := devicePrefix + d.name
		ro := "off"
		if d.readonly {
			ro = "on"
		}
		a = append(a,
			"-blockdev", fmt.Sprintf("driver=raw,node-name=%s,read-only=%s,file.driver=file,file.filename=%s,file.read-only=%s", id, ro, qemuOpt(d.path), ro),
			"-device", fmt.Sprintf("virtio-blk-pci,id=%s,drive=%s,bus=%s,serial=%s", id, id, hotplugPortID(i), serialOf(d.name)))
	}
	return a
}

func isTrue(v string) bool { return v == "true" || v == "1" || v == "yes" || v == "on" }

// serialOf is a disk's virtio serial: its device name (at most 20 bytes).
func serialOf(name string) string {
	if len(name) > 20 {
		return name[:20]
	}
	return name
}

// UpdateDevices hot-plugs disks into (and out of) a running guest through
// QMP: blockdev-add + device_add (virtio-blk-pci on a free hot-plug port,
// serial = the device name) to add; device_del, then DEVICE_DELETED, then
// blockdev-del to remove. A replaced device is removed first. Only disk
// devices with a volume file (sdk.KeyVolumePath) can be hot-plugged.
func (b *Backend) UpdateDevices(ctx context.Context, hb sdk.Handle, add map[string]sdk.Device, remove []string) error {
	h, err := b.decode(hb)
	if err != nil {
		return fmt.Errorf("updating devices: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(add)) {
		d := add[name]
		if d["type"] != "disk" || d[sdk.KeyVolumePath] == "" {
			return fmt.Errorf("updating devices of %q: device %q: only disks of a storage volume can be hot-plugged: %w", h.Name, name, sdk.ErrNotSupported)
		}
	}
	v := b.vm(h.UUID)
	v.op.Lock()
	defer v.op.Unlock()
	if !h.running() {
		return fmt.Errorf("updating devices of %q: %w: not running", h.Name, sdk.ErrConflict)
	}
	c, err := b.ensureQMP(ctx, h, v)
	if err != nil {
		return fmt.Errorf("updating devices of %q: %w", h.Name, err)
	}
	for _, name := range remove {
		if err := b.unplug(ctx, h, v, c, name, false); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(add)) {
		if err := b.unplug(ctx, h, v, c, name, true); err != nil {
			return err
		}
		if err := b.plug(ctx, h, c, name, add[name]); err != nil {
			return err
		}
	}
	return nil
}

func (b *Backend) plug(ctx context.Context, h *handle, c *qmp.Client, name string, d sdk.Device) error {
	id := devicePrefix + name
	ro := isTrue(d["readonly"])
	node := map[string]any{
		"driver": "raw", "node-name": id, "read-only": ro,
		"file": map[string]any{"driver": "file", "filename": d[sdk.KeyVolumePath], "read-only": ro},
	}
	if err := c.Execute(ctx, "blockdev-add", node, nil); err != nil {
		return fmt.Errorf("hot-plugging disk %q into %q: %w", name, h.Name, err)
	}
	serial := serialOf(name)
	var lastErr error
	for i := range hotplugPorts {
		err := c.Execute(ctx, "device_add", map[string]any{
			"driver": "virtio-blk-pci", "id": id, "drive": id, "bus": hotplugPortID(i), "serial": serial,
		}, nil)
		if err == nil {
			b.log.Info("disk hot-plugged", "name", h.Name, "device", name, "port", hotplugPortID(i))
			return nil
		}
		lastErr = err
		var qe *qmp.Error
		if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "in use") && !strings.Contains(qe.Desc, "not available") {
			break
		}
	}
	c.Execute(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": id}, nil)
	return fmt.Errorf("hot-plugging disk %q into %q (all %d hot-plug ports busy?): %w", name, h.Name, hotplugPorts, lastErr)
}

// unplug removes device name; a device that is not there is ErrNotFound,
// or nothing when quiet (before an add).
func (b *Backend) unplug(ctx context.Context, h *handle, v *vm, c *qmp.Client, name string, quiet bool) error {
	id := devicePrefix + name
	gone := v.watchDeleted(id)
	defer v.unwatchDeleted(id)
	err := c.Execute(ctx, "device_del", map[string]any{"id": id}, nil)
	var qe *qmp.Error
	if errors.As(err, &qe) && (qe.Class == "DeviceNotFound" || strings.Contains(qe.Desc, "not found")) {
		if quiet {
			return nil
		}
		return fmt.Errorf("removing device %q from %q: %w", name, h.Name, sdk.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("removing device %q from %q: %w", name, h.Name, err)
	}
	// A guest still booting can miss the unplug request: ask again every
	// unplugRetry until it releases the device (or QEMU says it is gone).
	deadline := time.NewTimer(unplugTimeout)
	defer deadline.Stop()
	retry := time.NewTicker(unplugRetry)
	defer retry.Stop()
wait:
	for {
		select {
		case <-gone:
			break wait
		case <-ctx.Done():
			return fmt.Errorf("removing device %q from %q: waiting for the guest to release it: %w", name, h.Name, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("removing device %q from %q: the guest did not release it within %v: %w", name, h.Name, unplugTimeout, sdk.ErrUnavailable)
		case <-retry.C:
			err := c.Execute(ctx, "device_del", map[string]any{"id": id}, nil)
			if errors.As(err, &qe) && (qe.Class == "DeviceNotFound" || strings.Contains(qe.Desc, "not found")) {
				break wait // released between the event and the retry
			}
		}
	}
	if err := c.Execute(ctx, "blockdev-del", map[string]any{"node-name": id}, nil); err != nil {
		return fmt.Errorf("removing the block node of %q from %q: %w", name, h.Name, err)
	}
	b.log.Info("disk unplugged", "name", h.Name, "device", name)
	return nil
}

// watchDeleted returns a channel closed when QEMU reports DEVICE_DELETED
// for device id.
func (v *vm) watchDeleted(id string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted == nil {
		v.deleted = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	v.deleted[id] = ch
	return ch
}

func (v *vm) unwatchDeleted(id string) {
	v.mu.Lock()
	delete(v.deleted, id)
	v.mu.Unlock()
}

// deviceDeleted signals the watcher of a DEVICE_DELETED event's device.
func (v *vm) deviceDeleted(data json.RawMessage) {
	var d struct {
		Device string `json:"device"`
	}
	if json.Unmarshal(data, &d) != nil || d.Device == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if ch, ok := v.deleted[d.Device]; ok {
		close(ch)
		delete(v.deleted, d.Device)
	}
}
