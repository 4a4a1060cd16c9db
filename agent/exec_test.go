package agent_test

import "os/exec"

var execCommand = exec.Command
