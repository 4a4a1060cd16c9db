package linkhost

// VhostVsockDevice is the host's vhost-vsock device: its presence enables
// the vsock link. (Reserving guest CIDs on it is the QEMU backend's job:
// plugins/shared/qemuvm.ReserveCID.)
const VhostVsockDevice = "/dev/vhost-vsock"
