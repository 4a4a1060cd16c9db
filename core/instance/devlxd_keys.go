package instance

// KeySecurityDevlxdManagementVolumes lets a trusted devlxd caller in the
// guest (a devlxd bearer token scoped to the instance) manage volumes and
// devices through devlxd; LXD's key of the same name.
const KeySecurityDevlxdManagementVolumes = "security.devlxd.management.volumes"

func init() { fixedKeys[KeySecurityDevlxdManagementVolumes] = checkBool }
