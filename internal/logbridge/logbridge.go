package logbridge

import (
	"bytes"
	"fmt"
	"log"
	"strings"

	"github.com/go-logr/logr"
)

// Writer turns each line written to it into a log entry of l.
type Writer struct {
	Log logr.Logger
	// Msg is the entries' message.
	Msg string
}

// Write logs every line of p (a log.Logger writes one line per call).
func (w Writer) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		l := w.Log
		if isClientNoise(s) {
			l = l.V(1)
		}
		l.Info(w.Msg, "line", s)
	}
	return len(p), nil
}

// isClientNoise tells the lines a client causes and the operator cannot
// act on: a TLS handshake that a scanner, a health checker or a client with
// the wrong CA broke off.
func isClientNoise(line string) bool {
	return strings.Contains(line, "TLS handshake error")
}

// StdLog is a standard library logger whose lines become entries of l:
// what an http.Server's ErrorLog wants.
func StdLog(l logr.Logger, msg string) *log.Logger {
	return log.New(Writer{Log: l, Msg: msg}, "", 0)
}

// RedirectStdLog sends the standard library's default logger (log.Printf,
// and every http.Server without an ErrorLog of its own) to l.
func RedirectStdLog(l logr.Logger) {
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(Writer{Log: l.WithName("stdlib"), Msg: "library log line"})
}

// MySQL is the MySQL driver's Logger (mysql.SetLogger) over l.
type MySQL struct{ Log logr.Logger }

// Print logs what the driver prints, one entry per call.
func (m MySQL) Print(v ...any) {
	Writer{Log: m.Log, Msg: "mysql driver"}.Write([]byte(fmt.Sprint(v...)))
}
