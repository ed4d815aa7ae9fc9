// Package faultproxy is a TCP proxy for tests that stands between a client
// (the operator) and one server (a MariaDB site) on loopback and can be
// switched, at run time, between forwarding, a simulated network partition,
// refusing connections and added latency.
//
// Modes, set with SetMode, apply to the connections already open as well as
// to new ones:
//
//   - Pass forwards bytes both ways, half-closes included.
//   - BlackHole is a partition: new connections are accepted (no connection
//     to the server is made) and every byte read from either side, on new and
//     already-open connections alike, is discarded; nothing is answered and
//     nothing is closed, so a client sees its reads stall until its own
//     timeout, as a pooled connection does across a real partition.
//   - Refuse resets every open connection and every new one. The listener
//     stays open (the port stays the proxy's): the kernel completes the
//     handshake and the proxy then resets the connection, so a client sees
//     its connect, or its first read or write, fail with ECONNRESET, not
//     ECONNREFUSED.
//   - Delay(d) forwards each chunk it reads d after reading it. Chunks of one
//     direction stay in order and are pipelined: d is added latency, not a
//     bandwidth limit.
//
// Leaving BlackHole (for any other mode) resets every connection that was
// open during it: the bytes it dropped leave their streams unusable, as a
// peer that lost a connection's state during a partition would. Clients
// with pools therefore see one failed use per pooled connection, then
// connect anew.
//
// Guarantees: a byte the proxy reads after SetMode(BlackHole) returns is
// never forwarded; SetMode(Refuse) has reset every open connection when it
// returns; the port never changes while the proxy is open; Close closes the
// listener and every connection and returns once every goroutine of the
// proxy has ended.
//
// Not provided: this is a simulation on loopback, TCP only. A chunk read
// before SetMode(BlackHole) may still be written after it returns (it was in
// flight); the kernel's buffers on both sides keep accepting writes until
// they fill, so a writer blocks late, not at once; a black-holed client's
// own close or reset is not passed on (the server side stays open until the
// mode changes or the proxy closes); no packet loss, reordering, bandwidth
// limit or asymmetric partition (one direction only) is modelled, and
// nothing below TCP (ICMP, TCP keepalive timing) behaves as on a network.
package faultproxy
