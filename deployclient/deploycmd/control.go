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
//	mark-ddl            ->  ok [note] | error <why>

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

// serveControl answers requests on l until ctx ends. markDDL confirms the
// boundary: nil once the operator confirmed it, with a note for the
// command's log.
func serveControl(ctx context.Context, l net.Listener, markDDL func(context.Context) (string, error)) {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			var answer string
			switch strings.TrimSpace(line) {
			case "mark-ddl":
				note, err := markDDL(ctx)
				switch {
				case err != nil:
					answer = "error " + oneLine(err.Error())
				case note != "":
					answer = "ok " + oneLine(note)
				default:
					answer = "ok"
				}
			default:
				answer = "error unknown request"
			}
			_, _ = fmt.Fprintln(c, answer)
		}()
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
