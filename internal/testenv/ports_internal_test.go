package testenv

import "testing"

// A port reserved by one test process is skipped by every other one until
// the first exits (flock: a second open file description of the same
// reservation cannot lock it, exactly as another process could not).
func TestAReservedPortIsNotHandedOutAgain(t *testing.T) {
	const port = freePortMax // never handed out by FreeAddr: its range is [freePortMin, freePortMax)
	first, ok := reserve(port)
	if !ok || first == nil {
		t.Fatal("the first reservation failed")
	}
	if _, ok := reserve(port); ok {
		t.Fatal("a reserved port was reserved again")
	}
	first.Close() // the process that held it exits
	again, ok := reserve(port)
	if !ok || again == nil {
		t.Fatal("a released port could not be reserved")
	}
	again.Close()
}
