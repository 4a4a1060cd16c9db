package events

// Lifecycle actions of the admin's access to a guest through its agent
// (issue 26), LXD's names. Their source is the instance; their requestor is
// who ran them. instance-exec comes once the command has ended: context
// "command" (its argv), "exit_code" (absent when it did not run to an
// exit), "error" (why not). The file actions come once the agent has
// answered: context "path" and "status" (the agent's HTTP status).
const (
	InstanceExec          = "instance-exec"
	InstanceFilePushed    = "instance-file-pushed"
	InstanceFileRetrieved = "instance-file-retrieved"
	InstanceFileDeleted   = "instance-file-deleted"
)
