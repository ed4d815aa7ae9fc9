package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with the bytes and connections it sees.
type Mode struct {
	kind  kind
	delay time.Duration
}

type kind int

const (
	pass kind = iota
	blackHole
	refuse
)

// The modes; Delay builds the fourth.
var (
	// Pass forwards bytes both ways.
	Pass = Mode{kind: pass}
	// BlackHole accepts and never forwards nor answers: a partition.
	BlackHole = Mode{kind: blackHole}
	// Refuse resets open and new connections.
	Refuse = Mode{kind: refuse}
)

// Delay forwards each chunk d after the proxy read it. Delay(0) is Pass.
func Delay(d time.Duration) Mode {
	if d <= 0 {
		return Pass
	}
	return Mode{kind: pass, delay: d}
}

func (m Mode) String() string {
	switch {
	case m.kind == blackHole:
		return "black-hole"
	case m.kind == refuse:
		return "refuse"
	case m.delay > 0:
		return fmt.Sprintf("delay(%v)", m.delay)
	}
	return "pass"
}

// dialTimeout bounds the connection to the target made for each accepted
// connection; a failed dial resets the client's connection.
const dialTimeout = 5 * time.Second

// chunkSize is the most a single read takes from one side.
const chunkSize = 32 << 10

// Proxy is a switchable TCP proxy on 127.0.0.1 in front of one target.
type Proxy struct {
	target   string
	ln       net.Listener
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64

	mu     sync.Mutex // guards mode, links and closed; taken before any link's mu
	mode   Mode
	links  map[*link]struct{}
	closed bool
}

// New starts a proxy in Pass mode on an ephemeral loopback port, forwarding
// to target (host:port). The target need not be listening yet: each accepted
// connection dials it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted counts the connections accepted so far, in every mode.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Mode is the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy, for open and new connections (see the package
// documentation for what each switch does to open connections).
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.mode
	p.mode = m
	for l := range p.links {
		switch {
		case m.kind == refuse:
			p.dropLocked(l, true)
		case m.kind == blackHole:
			l.stalled.Store(true)
		case old.kind == blackHole && l.stalled.Load():
			p.dropLocked(l, true)
		}
	}
}

// Close closes the listener and every connection, and waits until every
// goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.cancel()
	for l := range p.links {
		p.dropLocked(l, true)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed; loopback accepts do not fail otherwise
		}
		p.accepted.Add(1)
		p.admit(c)
	}
}

// admit registers an accepted connection under the mode of the moment, so
// that a concurrent SetMode either sees it or was seen by it.
func (p *Proxy) admit(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode.kind == refuse {
		reset(c)
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	l := &link{p: p, client: c, ctx: ctx, cancel: cancel}
	p.links[l] = struct{}{}
	if p.mode.kind == blackHole {
		l.stalled.Store(true)
		p.wg.Add(1)
		go l.read(c, nil) // nothing to forward to: discard until dropped
		return
	}
	p.wg.Add(1)
	go l.dialAndPump()
}

// drop forgets a link and closes its connections, with an RST if reset.
func (p *Proxy) drop(l *link, reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked(l, reset)
}

func (p *Proxy) dropLocked(l *link, reset bool) {
	delete(p.links, l)
	l.close(reset)
}

func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode.delay
}

// link is one client connection and, once dialled, its connection to the
// target. Its goroutines end when its context is cancelled.
type link struct {
	p       *Proxy
	client  net.Conn
	ctx     context.Context
	cancel  context.CancelFunc
	stalled atomic.Bool // set by BlackHole, never cleared: the link is dropped instead

	mu       sync.Mutex
	server   net.Conn
	closed   bool
	finished int // directions that ended with a forwarded EOF
}

type chunk struct {
	data []byte
	due  time.Time
}

func (l *link) close(rst bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.cancel()
	for _, c := range []net.Conn{l.client, l.server} {
		switch {
		case c == nil:
		case rst:
			reset(c)
		default:
			_ = c.Close()
		}
	}
}

func (l *link) dialAndPump() {
	defer l.p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(l.ctx, "tcp", l.p.target)
	if err != nil {
		l.p.drop(l, true) // the client sees a reset, as from a server that is down
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		reset(server)
		return
	}
	l.server = server
	l.mu.Unlock()
	up, down := make(chan chunk, 64), make(chan chunk, 64)
	l.p.wg.Add(4)
	go l.read(l.client, up)
	go l.write(server, up)
	go l.read(server, down)
	go l.write(l.client, down)
}

// read takes chunks from src and queues them for the writer on out, or
// discards them while the link is stalled (out is nil for a link accepted
// in BlackHole). An EOF is passed on as the closing of out; any other error
// drops the link.
func (l *link) read(src net.Conn, out chan<- chunk) {
	defer l.p.wg.Done()
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		stalled := out == nil || l.stalled.Load()
		if n > 0 && !stalled {
			c := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(l.p.delay())}
			select {
			case out <- c:
			case <-l.ctx.Done():
				return
			}
		}
		switch {
		case err == nil:
			continue
		case stalled || l.ctx.Err() != nil:
			// A partition hides the peer's close; a dropped link is done.
		case errors.Is(err, io.EOF):
			close(out)
		default:
			l.p.drop(l, true) // pass the failure on as a reset
		}
		return
	}
}

// write sends each chunk from in to dst once it is due, unless the link was
// stalled meanwhile. The end of in is passed on as a half-close; when both
// directions ended so, the link is dropped.
func (l *link) write(dst net.Conn, in <-chan chunk) {
	defer l.p.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-l.ctx.Done():
			return
		}
		if !ok {
			if tc, isTCP := dst.(*net.TCPConn); isTCP {
				_ = tc.CloseWrite()
			}
			l.finish()
			return
		}
		if wait := time.Until(c.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.ctx.Done():
				return
			}
		}
		if l.stalled.Load() {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			if !l.stalled.Load() {
				l.p.drop(l, true)
			}
			return
		}
	}
}

func (l *link) finish() {
	l.mu.Lock()
	l.finished++
	both := l.finished == 2
	l.mu.Unlock()
	if both {
		l.p.drop(l, false) // both sides closed: a FIN, so nothing queued is lost
	}
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
