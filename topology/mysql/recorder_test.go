package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	gomysql "github.com/go-sql-driver/mysql"
)

// recorder is a database/sql driver that answers the driver's statements
// from a script and records every one it is sent, with its arguments, in
// order: the SQL-level seam for the MySQL 8 dialect, which no server here
// can run.
type recorder struct {
	version string
	// replicaStatus is the one row of SHOW REPLICA STATUS (column, value).
	replicaStatus [][2]string
	// gtidExecuted answers the dialect's gtidExecuted query.
	gtidExecuted string
	// fence is the fence row fenceRead answers.
	fenceGen    int64
	fenceActive string

	mu  sync.Mutex
	log []string
}

// statement is how a statement appears in the log: the SQL, then its
// arguments after " | ", comma-separated.
func statement(q string, args ...any) string {
	if len(args) == 0 {
		return q
	}
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	return q + " | " + strings.Join(s, ", ")
}

func (r *recorder) record(q string, args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	r.mu.Lock()
	r.log = append(r.log, statement(q, vals...))
	r.mu.Unlock()
}

func (r *recorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// connectTo returns a Driver.connect that hands addr's pool to r; every
// other address refuses connections, as a site that is down does.
func connectTo(addr string, r *recorder) func(cfg *gomysql.Config) (*sql.DB, error) {
	return func(cfg *gomysql.Config) (*sql.DB, error) {
		if cfg.Addr != addr {
			return sql.OpenDB(downConnector{}), nil
		}
		return sql.OpenDB(recConnector{r}), nil
	}
}

type downConnector struct{}

func (downConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("connection refused")
}
func (downConnector) Driver() driver.Driver { return nil }

type recConnector struct{ r *recorder }

func (c recConnector) Connect(context.Context) (driver.Conn, error) { return recConn(c), nil }
func (c recConnector) Driver() driver.Driver                        { return nil }

type recConn struct{ r *recorder }

var (
	_ driver.QueryerContext = recConn{}
	_ driver.ExecerContext  = recConn{}
)

func (recConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("recorder: no prepare") }
func (recConn) Close() error                        { return nil }
func (recConn) Begin() (driver.Tx, error)           { return nil, errors.New("recorder: no transactions") }

func (c recConn) ExecContext(_ context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.r.record(q, args)
	return driver.RowsAffected(1), nil
}

func (c recConn) QueryContext(_ context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.record(q, args)
	r := c.r
	switch {
	case q == "SELECT VERSION()":
		return rowsOf([]string{"VERSION()"}, []driver.Value{r.version}), nil
	case q == "SHOW REPLICA STATUS":
		cols := make([]string, len(r.replicaStatus))
		vals := make([]driver.Value, len(r.replicaStatus))
		for i, cv := range r.replicaStatus {
			cols[i], vals[i] = cv[0], cv[1]
		}
		return rowsOf(cols, vals), nil
	case q == mariaDB.gtidExecuted || q == mySQL8.gtidExecuted:
		return rowsOf([]string{"gtid"}, []driver.Value{r.gtidExecuted}), nil
	case q == mariaDB.waitGTID || q == mySQL8.waitGTID:
		return rowsOf([]string{"wait"}, []driver.Value{int64(0)}), nil
	case q == fenceRead:
		return rowsOf([]string{"generation", "active_site"}, []driver.Value{r.fenceGen, r.fenceActive}), nil
	}
	return nil, fmt.Errorf("recorder: unscripted query %q", q)
}

// rows is a result of at most one row.
type rows struct {
	cols []string
	row  []driver.Value
	done bool
}

func rowsOf(cols []string, row []driver.Value) *rows { return &rows{cols: cols, row: row} }

func (r *rows) Columns() []string { return r.cols }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if r.done || r.row == nil {
		return io.EOF
	}
	r.done = true
	copy(dest, r.row)
	return nil
}
