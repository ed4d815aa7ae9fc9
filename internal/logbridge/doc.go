// Package logbridge routes the lines other libraries print through the
// operator's structured logger, so that every line the operator writes is
// one JSON object: the standard library's log package (net/http servers'
// ErrorLog, "http: TLS handshake error from …", whoever calls log.Printf)
// and the MySQL driver's logger ("[mysql] … closing bad idle connection").
//
// It guarantees: one log entry per line written, its text under "line", the
// source under "logger"; TLS handshake errors (a client's or a scanner's
// fault, never the operator's) at debug level, everything else at info.
//
// It does not: parse the lines (their text is kept as written), or redirect
// writes made straight to os.Stderr.
package logbridge
