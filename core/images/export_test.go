package images

// SetCheckHook makes s check the free space every every bytes of a copy
// and call fn after each check that passed (tests only).
func SetCheckHook(s *Store, every int64, fn func()) { s.checkEvery, s.afterCheck = every, fn }
