package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// stallWindow is how long a read must stay unanswered to count as stalled.
const stallWindow = 300 * time.Millisecond

// Each case gets its own echo server and a proxy in Pass mode in front of it.
func TestModes(t *testing.T) {
	const d = 100 * time.Millisecond
	cases := map[string]func(t *testing.T, p *Proxy, e *echoServer){
		"pass echoes both ways": func(t *testing.T, p *Proxy, _ *echoServer) {
			c := dial(t, p)
			roundTrip(t, c, "ping")
			roundTrip(t, c, "pong")
		},
		"pass passes a half-close on": func(t *testing.T, p *Proxy, _ *echoServer) {
			c := dial(t, p)
			if _, err := c.Write([]byte("bye")); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c) // the echo server closes after our EOF
			if err != nil || string(got) != "bye" {
				t.Fatalf("read %q, %v; want \"bye\" then EOF", got, err)
			}
		},
		"black hole stalls a new connection": func(t *testing.T, p *Proxy, _ *echoServer) {
			p.SetMode(BlackHole)
			stalls(t, dial(t, p), "ping")
		},
		"black hole stalls an open connection": func(t *testing.T, p *Proxy, _ *echoServer) {
			c := dial(t, p)
			roundTrip(t, c, "ping")
			p.SetMode(BlackHole)
			stalls(t, c, "ping")
		},
		"black hole drops what the server sends on an open connection": func(t *testing.T, p *Proxy, e *echoServer) {
			c := dial(t, p)
			roundTrip(t, c, "ping")
			server := <-e.conns
			p.SetMode(BlackHole)
			if _, err := server.Write([]byte("unsolicited")); err != nil {
				t.Fatal(err)
			}
			stalls(t, c, "")
		},
		"leaving black hole resets the stalled connections and passes new ones": func(t *testing.T, p *Proxy, _ *echoServer) {
			c := dial(t, p)
			roundTrip(t, c, "ping")
			p.SetMode(BlackHole)
			if _, err := c.Write([]byte("lost")); err != nil {
				t.Fatal(err)
			}
			p.SetMode(Pass)
			fails(t, c)
			roundTrip(t, dial(t, p), "ping")
		},
		"refuse resets a new connection": func(t *testing.T, p *Proxy, _ *echoServer) {
			p.SetMode(Refuse)
			resetOrFails(t, p)
		},
		"refuse resets an open connection": func(t *testing.T, p *Proxy, _ *echoServer) {
			c := dial(t, p)
			roundTrip(t, c, "ping")
			p.SetMode(Refuse)
			fails(t, c)
		},
		"pass after refuse lets new connections through": func(t *testing.T, p *Proxy, _ *echoServer) {
			p.SetMode(Refuse)
			p.SetMode(Pass)
			roundTrip(t, dial(t, p), "ping")
		},
		"delay holds each chunk for at least d, on open and new connections": func(t *testing.T, p *Proxy, _ *echoServer) {
			open := dial(t, p)
			roundTrip(t, open, "warm")
			p.SetMode(Delay(d))
			for name, c := range map[string]net.Conn{"open": open, "new": dial(t, p)} {
				start := time.Now()
				roundTrip(t, c, "ping")
				if took := time.Since(start); took < 2*d { // d each way
					t.Errorf("%s connection: round trip took %v, want at least %v", name, took, 2*d)
				}
			}
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := startEcho(t)
			p, err := New(e.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			run(t, p, e)
		})
	}
}

func TestNewListensOnAnEphemeralLoopbackPort(t *testing.T) {
	a, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Port() == 0 || a.Port() == b.Port() {
		t.Fatalf("ports %d and %d, want two distinct ephemeral ports", a.Port(), b.Port())
	}
	if host, _, _ := net.SplitHostPort(a.Addr()); host != "127.0.0.1" {
		t.Fatalf("Addr %s, want 127.0.0.1", a.Addr())
	}
}

// A target that is down resets the client's connection, as the server's
// refusal would have.
func TestATargetThatIsDownResetsTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	p, err := New(down)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	resetOrFails(t, p)
}

// Close ends every goroutine of the proxy, whatever its connections were
// doing: passing, holding a delayed chunk, black-holed.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	e := startEcho(t)
	before := runtime.NumGoroutine()
	p, err := New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	passing := dial(t, p)
	roundTrip(t, passing, "ping")
	p.SetMode(Delay(time.Hour))
	delayed := dial(t, p)
	for _, c := range []net.Conn{passing, delayed} {
		if _, err := c.Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	p.SetMode(BlackHole)
	_ = dial(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	e.stop() // and with it the echo server's side of the proxy's connections
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond) // a straggler is between its last statement and its exit
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the listener is still open after Close")
	}
}

// echoServer echoes every connection and hands the server side of each to
// conns, so a test can also write from the server.
type echoServer struct {
	ln       net.Listener
	conns    chan net.Conn
	handlers sync.WaitGroup
	accept   sync.WaitGroup
	mu       sync.Mutex
	open     []net.Conn
	stopped  sync.Once
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, conns: make(chan net.Conn, 16)}
	e.accept.Add(1)
	go func() {
		defer e.accept.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.open = append(e.open, c)
			e.mu.Unlock()
			select {
			case e.conns <- c:
			default:
			}
			e.handlers.Add(1)
			go func() {
				defer e.handlers.Done()
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(e.stop)
	return e
}

// stop closes the listener and every connection and waits for the
// handlers.
func (e *echoServer) stop() {
	e.stopped.Do(func() {
		e.ln.Close()
		e.accept.Wait() // no handlers.Add after this
		e.mu.Lock()
		for _, c := range e.open {
			c.Close()
		}
		e.mu.Unlock()
		e.handlers.Wait()
	})
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo of %q: got %q, %v", msg, got, err)
	}
}

// stalls writes msg (if any) and asserts that nothing, not even a close,
// comes back within stallWindow.
func stalls(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if msg != "" {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(stallWindow))
	defer c.SetReadDeadline(time.Time{})
	n, err := c.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want a stall (deadline exceeded)", n, err)
	}
}

// resetOrFails dials p and asserts that the connect fails, or that the
// connection is reset: the reset can beat connect's return on loopback.
func resetOrFails(t *testing.T, p *Proxy) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	fails(t, c)
}

// fails asserts that the connection was reset or closed: a read returns an
// error other than a timeout.
func fails(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("x")) // may already fail with the reset
	n, err := c.Read(make([]byte, 64))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the connection reset or closed", n, err)
	}
}
