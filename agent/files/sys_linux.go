package files

import (
	"io/fs"
	"syscall"
)

// noFollow refuses a symlink as the last element of an opened path: Get
// and Write check the type first, this closes the race with a swap.
const noFollow = syscall.O_NOFOLLOW

func owner(fi fs.FileInfo, in *Info) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		in.UID, in.GID = int(st.Uid), int(st.Gid)
	}
}

// errLoop is what opening a symlink with noFollow fails with.
const errLoop = syscall.ELOOP
