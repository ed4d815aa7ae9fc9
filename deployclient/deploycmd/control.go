package deploycmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// The control socket: a run listens on a Unix socket in its private
// directory, and the command's `mark-ddl` asks it to confirm the DDL
// boundary. One request per connection, one line each way:
//
//	mark-ddl                          ->  ok [note] | error <why>
//	cut-over <budget-ms> <timeout-ms> ->  ok | error <why>
//	postponing                        ->  ok | error <why>

// askRun sends one request to the run's control socket and returns the
// answer's note; an "error" answer is an error.
func askRun(sock, request string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("reach the run: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(c, request); err != nil {
		return "", fmt.Errorf("ask the run: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("the run did not answer: %w", err)
	}
	line = strings.TrimSpace(line)
	switch {
	case line == "ok":
		return "", nil
	case strings.HasPrefix(line, "ok "):
		return strings.TrimPrefix(line, "ok "), nil
	case strings.HasPrefix(line, "error "):
		return "", errors.New(strings.TrimPrefix(line, "error "))
	}
	return "", fmt.Errorf("unexpected answer %q", line)
}

// serveControl answers requests on l until ctx ends, one per connection:
// answer gets the request line and a context that ends with ctx or when
// the asking side goes away (a cut-over hook killed while it waits), and
// returns the answer's note or an error.
func serveControl(ctx context.Context, l net.Listener, answer func(ctx context.Context, request string) (string, error)) {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				// The asker sends nothing more: EOF or an error means it
				// is gone, and so is its question.
				_, _ = r.ReadByte()
				cancel()
			}()
			var out string
			note, err := answer(rctx, strings.TrimSpace(line))
			switch {
			case err != nil:
				out = "error " + oneLine(err.Error())
			case note != "":
				out = "ok " + oneLine(note)
			default:
				out = "ok"
			}
			_, _ = fmt.Fprintln(c, out)
		}()
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
