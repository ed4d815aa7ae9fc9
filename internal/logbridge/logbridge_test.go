package logbridge

import (
	"bytes"
	"encoding/json"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// jsonLogger is a zap JSON logger at info level writing into buf, as the
// operator's.
func jsonLogger(buf *bytes.Buffer) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(buf), zapcore.InfoLevel))
}

// entries parses buf as JSON lines, failing on any line that is not one.
func entries(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		out = append(out, m)
	}
	return out
}

func TestLinesBecomeStructuredEntries(t *testing.T) {
	tests := map[string]struct {
		emit  func(l *log.Logger, m MySQL)
		lines []string // the entries' "line" at info level
		msg   string
	}{
		"an http.Server error": {
			emit:  func(l *log.Logger, _ MySQL) { l.Printf("http: panic serving 10.0.0.1:5555: boom") },
			lines: []string{"http: panic serving 10.0.0.1:5555: boom"}, msg: "http server",
		},
		"a TLS handshake error is debug, so not at info": {
			emit: func(l *log.Logger, _ MySQL) { l.Printf("http: TLS handshake error from 10.0.0.1:5555: EOF") },
		},
		"the MySQL driver": {
			emit: func(_ *log.Logger, m MySQL) {
				m.Print("packets.go:58 ", "closing bad idle connection: EOF")
			},
			lines: []string{"packets.go:58 closing bad idle connection: EOF"}, msg: "mysql driver",
		},
		"two lines in one write are two entries": {
			emit:  func(l *log.Logger, _ MySQL) { l.Print("first\nsecond") },
			lines: []string{"first", "second"}, msg: "http server",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l := zapr.NewLogger(jsonLogger(&buf))
			tc.emit(StdLog(l, "http server"), MySQL{Log: l})
			got := entries(t, &buf)
			if len(got) != len(tc.lines) {
				t.Fatalf("%d entries, want %d: %s", len(got), len(tc.lines), buf.String())
			}
			for i, e := range got {
				if e["line"] != tc.lines[i] || e["msg"] != tc.msg {
					t.Errorf("entry %d = %v, want line %q msg %q", i, e, tc.lines[i], tc.msg)
				}
			}
		})
	}
}

func TestRedirectStdLogCoversTheDefaultLogger(t *testing.T) {
	defer func(p string, f int) { log.SetOutput(os.Stderr); log.SetPrefix(p); log.SetFlags(f) }(log.Prefix(), log.Flags())
	var buf bytes.Buffer
	RedirectStdLog(zapr.NewLogger(jsonLogger(&buf)))
	log.Printf("a library's line")
	got := entries(t, &buf)
	if len(got) != 1 || got[0]["line"] != "a library's line" || got[0]["logger"] != "stdlib" {
		t.Fatalf("entries %v", got)
	}
}
