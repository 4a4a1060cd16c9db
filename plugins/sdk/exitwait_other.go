//go:build !linux

package sdk

import "errors"

// processExit is not available here: the caller polls.
func processExit(int) (<-chan struct{}, func(), error) {
	return nil, nil, errors.New("no pidfd on this system")
}
