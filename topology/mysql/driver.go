package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"k8s.io/utils/clock"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

// ErrErrantTransactions: a fenced site holds transactions the primary never
// had; it stays fenced and needs a human.
var ErrErrantTransactions = errors.New("site has errant transactions: left fenced (read-only), needs manual repair")

// Credentials resolves the account for a group, and its TLS material when
// spec.tls requires TLS (from the Secrets the group names).
type Credentials func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error)

// Driver is the SQL topology driver.
type Driver struct {
	Credentials Credentials
	// CredentialsRejected, when set, is told that a site refused the
	// group's account (error 1045): a cache of Credentials reads them
	// afresh on the next call.
	CredentialsRejected func(g *bloodravenv1alpha1.MysqlFailoverGroup)
	// WaitTimeout bounds GTID waits during promotion; default 30 s.
	WaitTimeout time.Duration
	// Clock is what the driver's own waits (Rejoin's wait for the
	// replication threads) read and sleep on; clock.RealClock when nil.
	// NewCached sets it to the clock it is given when that clock can wait.
	Clock clock.Clock

	// connect opens the pool of one site's configuration; nil:
	// go-sql-driver/mysql. Tests put a recording database/sql driver here.
	connect func(cfg *gomysql.Config) (*sql.DB, error)

	mu sync.Mutex
	// dbs are the connection pools, one per group (UID) and address: two
	// groups that name the same host never share a pool, nor an account.
	dbs map[poolKey]*pool
}

type poolKey struct {
	uid  string
	addr string
}

type pool struct {
	// id is what the pool was opened with: the DSN (the account) and the
	// TLS material's fingerprint. A pool whose id changed is replaced.
	id string
	db *sql.DB
}

var (
	_ topology.Driver     = (*Driver)(nil)
	_ topology.SiteProber = (*Driver)(nil)
)

// New returns a driver that reads credentials with creds.
func New(creds Credentials) *Driver { return &Driver{Credentials: creds, dbs: map[poolKey]*pool{}} }

type site struct {
	name string
	host string
	port int
	db   *sql.DB
	d    dialect
}

func (d *Driver) clock() clock.Clock {
	if d.Clock != nil {
		return d.Clock
	}
	return clock.RealClock{}
}

func (d *Driver) waitTimeout() time.Duration {
	if d.WaitTimeout > 0 {
		return d.WaitTimeout
	}
	return 30 * time.Second
}

// open returns a pooled connection to one site. A group whose spec.tls
// requires TLS is connected to only over TLS verified against its CA and
// the site's host; a site that offers no TLS is refused (gomysql.ErrNoTLS).
func (d *Driver) open(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, s bloodravenv1alpha1.Site) (*site, error) {
	acct, err := d.Credentials(ctx, g)
	if err != nil {
		return nil, err
	}
	cfg := gomysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net = acct.User, acct.Password, "tcp"
	port := int(s.Port)
	if port == 0 {
		port = 3306
	}
	cfg.Addr = fmt.Sprintf("%s:%d", s.Host, port)
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 10*time.Second, 10*time.Second
	// The pool's identity: the account and, with TLS, the material's
	// fingerprint. A pool is opened, and its TLS configuration built (the
	// CA parsed, the key pair loaded), only when its identity changes, not
	// on every open of a site.
	id := cfg.FormatDSN()
	if TLSRequired(g) {
		if acct.TLS == nil {
			// Read again on the next call: the Secret may be mended by then.
			d.invalidate(g)
			return nil, fmt.Errorf("site %s: %w", s.Name, errTLSNotConfigured)
		}
		id += "|tls:" + acct.TLS.fingerprint()
	}
	k := poolKey{uid: string(g.UID), addr: cfg.Addr}
	d.mu.Lock()
	if d.dbs == nil {
		d.dbs = map[poolKey]*pool{}
	}
	p, ok := d.dbs[k]
	if ok && p.id != id { // the account or the TLS material changed: a new pool
		p.db.Close()
		delete(d.dbs, k)
		ok = false
	}
	if !ok {
		if TLSRequired(g) {
			if cfg.TLS, err = acct.TLS.config(s.Host); err != nil {
				d.mu.Unlock()
				d.invalidate(g) // material that makes no configuration is read again next time
				return nil, fmt.Errorf("site %s: %w", s.Name, err)
			}
		}
		connect := d.connect
		if connect == nil {
			connect = openPool
		}
		db, err := connect(cfg)
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
		db.SetMaxOpenConns(4)
		db.SetConnMaxIdleTime(30 * time.Second)
		p = &pool{id: id, db: db}
		d.dbs[k] = p
	}
	d.mu.Unlock()
	st := &site{name: s.Name, host: s.Host, port: port, db: p.db}
	// Every open asks the server, bounded: a hung or black-holed site fails
	// here within 3 s, not in the step that follows (whose own queries may
	// run without a deadline of their own).
	var version string
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := p.db.QueryRowContext(qctx, "SELECT VERSION()").Scan(&version); err != nil {
		d.rejected(g, err)
		return nil, fmt.Errorf("site %s: %w", s.Name, err)
	}
	st.d = dialectFor(version)
	return st, nil
}

// invalidate tells CredentialsRejected, when set, to read g's Secrets again.
func (d *Driver) invalidate(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if d.CredentialsRejected != nil {
		d.CredentialsRejected(g)
	}
}

// openPool opens go-sql-driver/mysql's pool for cfg.
func openPool(cfg *gomysql.Config) (*sql.DB, error) {
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// rejected tells CredentialsRejected about an access-denied answer (the
// password, or the client certificate the account requires) and about a
// server certificate that failed verification or a site without TLS (the
// CA may have been rotated): the next open reads the Secrets again.
func (d *Driver) rejected(g *bloodravenv1alpha1.MysqlFailoverGroup, err error) {
	var me *gomysql.MySQLError
	if (errors.As(err, &me) && me.Number == 1045) || tlsRejected(err) {
		d.invalidate(g)
	}
}

func siteSpec(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) (bloodravenv1alpha1.Site, error) {
	for _, s := range g.Spec.Sites {
		if s.Name == name {
			if s.Host == "" {
				return s, fmt.Errorf("site %s has no host", name)
			}
			return s, nil
		}
	}
	return bloodravenv1alpha1.Site{}, fmt.Errorf("site %s is not in the group", name)
}

// replicaStatus reads SHOW REPLICA STATUS into a map (empty when the server
// is not a replica).
func (s *site) replicaStatus(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if !rows.Next() {
		return out, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}

// probe reads one site's state.
func (s *site) probe(ctx context.Context) (topology.SiteState, string, error) {
	st := topology.SiteState{Name: s.name, Reachable: true}
	var ro, sro int
	if err := s.db.QueryRowContext(ctx, s.d.readOnlyQuery).Scan(&ro, &sro); err != nil {
		return topology.SiteState{Name: s.name}, "", err
	}
	st.Writable = ro == 0 && sro == 0
	rs, err := s.replicaStatus(ctx)
	if err != nil {
		return topology.SiteState{Name: s.name}, "", err
	}
	st.ReplicationRunning = rs[s.d.ioRunning] == "Yes" && rs[s.d.sqlRunning] == "Yes"
	if lag, err := strconv.ParseFloat(rs[s.d.lag], 64); err == nil {
		st.LagSeconds = lag
	}
	var gtid string
	if err := s.db.QueryRowContext(ctx, s.d.gtidExecuted).Scan(&gtid); err != nil {
		return topology.SiteState{Name: s.name}, "", err
	}
	return st, gtid, nil
}

// Probe observes every site at once, each bounded by topology.ProbeTimeout;
// an unreachable site is reported, not an error.
func (d *Driver) Probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]topology.SiteState, error) {
	out := make([]topology.SiteState, len(g.Spec.Sites))
	var wg sync.WaitGroup
	for i, sp := range g.Spec.Sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = d.probeSite(ctx, g, sp)
		}()
	}
	wg.Wait()
	return out, nil
}

// ProbeSite observes one site, bounded by topology.ProbeTimeout.
func (d *Driver) ProbeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name string) (topology.SiteState, error) {
	for _, sp := range g.Spec.Sites {
		if sp.Name == name {
			return d.probeSite(ctx, g, sp), nil
		}
	}
	return topology.SiteState{Name: name}, nil
}

func (d *Driver) probeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sp bloodravenv1alpha1.Site) topology.SiteState {
	st := topology.SiteState{Name: sp.Name}
	if sp.Host == "" {
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, topology.ProbeTimeout)
	defer cancel()
	s, err := d.open(ctx, g, sp)
	if err != nil {
		return st
	}
	got, _, err := s.probe(ctx)
	if err != nil {
		d.rejected(g, err)
		return st
	}
	return got
}

// GTIDs returns each reachable site's executed GTID set.
func (d *Driver) GTIDs(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (map[string]string, error) {
	out := map[string]string{}
	for _, sp := range g.Spec.Sites {
		s, err := d.open(ctx, g, sp)
		if err != nil {
			continue
		}
		if _, gtid, err := s.probe(ctx); err == nil {
			out[sp.Name] = gtid
		}
	}
	return out, nil
}

func (s *site) exec(ctx context.Context, stmts ...string) error {
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("site %s: %s: %w", s.name, redact(q), err)
		}
	}
	return nil
}

// redact keeps passwords out of errors.
func redact(q string) string {
	if strings.HasPrefix(q, "CHANGE") {
		if i := strings.Index(q, ","); i > 0 {
			return q[:i] + ", …"
		}
	}
	return q
}

// Promote makes target the writable primary under generation. A planned
// promotion runs FenceOthers first, so it never opens target while another
// site may still be writable.
func (d *Driver) Promote(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, target string, generation int64, planned bool) error {
	tspec, err := siteSpec(g, target)
	if err != nil {
		return err
	}
	// A deposed leader never acts on the data plane: confirmed before the
	// first action, and again (below) before the target is opened.
	if _, cancel, err := topology.ConfirmLeading(ctx); err != nil {
		return fmt.Errorf("promote %s: %w", target, err)
	} else {
		cancel()
	}
	t, err := d.open(ctx, g, tspec)
	if err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	acct, err := d.Credentials(ctx, g)
	if err != nil {
		return err
	}
	// The other reachable sites, to point at the new primary.
	// An emergency promotion does not dial a site the prober has just seen
	// dead (topology.WithSkipped): the controller rejoins it when it
	// answers again. A planned one skips nothing (FenceOthers below).
	var others []*site
	for _, sp := range g.Spec.Sites {
		if sp.Name == target || sp.Host == "" || (!planned && topology.Skipped(ctx, sp.Name)) {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, topology.ProbeTimeout)
		s, err := d.open(octx, g, sp)
		cancel()
		if err == nil {
			others = append(others, s)
		}
	}
	if planned {
		// Stop writes on every other site, confirmed, and wait until the
		// target has applied everything they wrote. It skips no site: one it
		// cannot reach fails the promotion.
		if err := d.FenceOthers(ctx, g, target); err != nil {
			return err
		}
	} else {
		// Emergency: apply what was already received, before the relay log
		// that holds it is reset below. The wait is bounded (WaitTimeout):
		// a target that cannot apply it is promoted all the same, as the
		// old primary is gone.
		_ = t.applyReceived(ctx, d.waitTimeout())
	}
	// Still leading? FenceOthers' GTID wait, or a pause of this process,
	// may have outlasted the leader lease; everything from here on opens
	// or re-points a site, and runs within the leadership confirmed now.
	ctx, cancel, err := topology.ConfirmLeading(ctx)
	if err != nil {
		return fmt.Errorf("promote %s: %w", target, err)
	}
	defer cancel()
	// Never open a site while a reachable one carries a newer fence row:
	// a newer move was made by someone else.
	for _, o := range others {
		if err := o.noNewerFence(ctx, generation, target); err != nil {
			return err
		}
	}
	// Stop replicating, record the fence (never over a newer one), then
	// open for writes.
	if err := t.exec(ctx, t.d.stopReplica, t.d.resetReplica); err != nil {
		return err
	}
	if err := t.exec(ctx, fenceSchema, fenceTable); err != nil {
		return err
	}
	if _, err := t.db.ExecContext(ctx, fenceWrite, generation, target); err != nil {
		return fmt.Errorf("site %s: write fence: %w", target, err)
	}
	if err := t.noNewerFence(ctx, generation, target); err != nil {
		return err
	}
	if err := t.exec(ctx, t.d.readOnlyOff...); err != nil {
		return err
	}
	// Point every other reachable site at the new primary. A replica that
	// already replicates from it is left alone: re-pointing discards its
	// relay log, and with it what it received but has not applied yet.
	for _, o := range others {
		if err := o.exec(ctx, o.d.readOnlyOn...); err != nil {
			return err
		}
		if o.replicatesFrom(ctx, tspec.Host, t.port) {
			continue
		}
		if err := o.exec(ctx, o.d.stopReplica, o.d.changeSourceSQL(tspec.Host, t.port, acct.User, acct.Password, TLSRequired(g)), o.d.startReplica); err != nil {
			return err
		}
	}
	return nil
}

// ErrNewerFence: a site carries a fence row of a newer move than the one
// being made (a greater generation, or another site at the same one): the
// promotion opens nothing.
var ErrNewerFence = errors.New("a newer fence row: another move was made; not opened")

// noNewerFence fails with ErrNewerFence when the site's fence row records a
// newer move than generation to target. A site without the row (no table
// yet) records none.
func (s *site) noNewerFence(ctx context.Context, generation int64, target string) error {
	var gen int64
	var active string
	err := s.db.QueryRowContext(ctx, fenceRead).Scan(&gen, &active)
	var me *gomysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && (me.Number == 1146 || me.Number == 1049):
		return nil // no fence row yet
	case err != nil:
		return fmt.Errorf("site %s: read fence: %w", s.name, err)
	case NewerFence(gen, active, generation, target):
		return fmt.Errorf("site %s records generation %d on %s, promoting %s at %d: %w", s.name, gen, active, target, generation, ErrNewerFence)
	}
	return nil
}

// NewerFence tells whether a fence row (gen, active) records a newer move
// than generation to target: a greater generation, or the same generation
// on another site.
func NewerFence(gen int64, active string, generation int64, target string) bool {
	return gen > generation || (gen == generation && active != target)
}

// replicatesFrom tells whether the site's replication threads run against
// host:port.
func (s *site) replicatesFrom(ctx context.Context, host string, port int) bool {
	rs, err := s.replicaStatus(ctx)
	return err == nil && rs[s.d.sourceHost] == host && rs[s.d.sourcePort] == strconv.Itoa(port) &&
		rs[s.d.ioRunning] == "Yes" && rs[s.d.sqlRunning] == "Yes"
}

// applyReceived waits, bounded by timeout, until the site has applied every
// transaction its replication has received: the GTIDs of the dialect's
// receivedGTID column (MariaDB Gtid_IO_Pos, waited for with
// MASTER_GTID_WAIT; MySQL 8 Retrieved_Gtid_Set, waited for with
// WAIT_FOR_EXECUTED_GTID_SET). A site that has received nothing (not a
// replica, or an empty set) has nothing to wait for.
func (s *site) applyReceived(ctx context.Context, timeout time.Duration) error {
	rs, err := s.replicaStatus(ctx)
	if err != nil {
		return fmt.Errorf("site %s: replica status: %w", s.name, err)
	}
	// MySQL prints a long GTID set over several lines.
	received := strings.Join(strings.Fields(rs[s.d.receivedGTID]), "")
	return s.waitFor(ctx, received, timeout)
}

// waitFor waits until the site has applied gtid.
func (s *site) waitFor(ctx context.Context, gtid string, timeout time.Duration) error {
	if gtid == "" {
		return nil
	}
	if s.d.name == mariaDB.name {
		// MASTER_GTID_WAIT waits on gtid_slave_pos, which never holds the
		// site's own writes: a target already promoted once (its fence row,
		// replicated back to the old primary) would wait forever on a
		// resumed promotion. Its binary log (log-slave-updates) already
		// holds both its own and the applied transactions.
		var have string
		if err := s.db.QueryRowContext(ctx, s.d.gtidExecuted).Scan(&have); err == nil && mariadbGTIDCovers(have, gtid) {
			return nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	var res sql.NullInt64
	if err := s.db.QueryRowContext(wctx, s.d.waitGTID, gtid, int(timeout.Seconds())).Scan(&res); err != nil {
		return fmt.Errorf("site %s: wait for GTID %s: %w", s.name, gtid, err)
	}
	if !res.Valid || res.Int64 != 0 {
		return fmt.Errorf("site %s did not apply GTID %s within %v", s.name, gtid, timeout)
	}
	return nil
}

// fenceTimeout bounds each site's part of FenceOthers: a paused or
// black-holed server answers nothing, and the planned path must give up on
// it rather than wait.
const fenceTimeout = 5 * time.Second

// fenceWait bounds FenceOthers' wait for the target to apply what a fenced
// site wrote: the controller admits only a target that lags a few seconds
// at most (policy.MaxPlannedLagSeconds), and the old primary refuses writes
// while it waits.
const fenceWait = 10 * time.Second

// FenceOthers makes every site of g but target read-only, confirms each by
// reading @@read_only back, reads its GTID position, and waits until target
// has applied it. A site without a host, or one that cannot be reached,
// fenced or confirmed within fenceTimeout, fails it with an
// *topology.UnreachableError naming the site: a planned promotion never
// skips a site that may still be writable.
func (d *Driver) FenceOthers(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, target string) error {
	tspec, err := siteSpec(g, target)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	t, err := d.open(tctx, g, tspec)
	cancel()
	if err != nil {
		return &topology.UnreachableError{Site: target, Err: err}
	}
	for _, sp := range g.Spec.Sites {
		if sp.Name == target {
			continue
		}
		gtid, err := d.fenceAndConfirm(ctx, g, sp)
		if errors.Is(err, topology.ErrNotLeading) {
			return err // not the site's fault
		}
		if err != nil {
			return &topology.UnreachableError{Site: sp.Name, Err: err}
		}
		if err := t.waitFor(ctx, gtid, min(fenceWait, d.waitTimeout())); err != nil {
			return err
		}
	}
	return nil
}

// fenceAndConfirm makes one site read-only, reads it back, and returns its
// GTID position once it is confirmed read-only.
func (d *Driver) fenceAndConfirm(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sp bloodravenv1alpha1.Site) (string, error) {
	if sp.Host == "" {
		return "", fmt.Errorf("site %s has no host", sp.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	o, err := d.open(ctx, g, sp)
	if err != nil {
		return "", err
	}
	// A deposed leader fences nothing either: a pause of this process (in
	// the dial above, say) may have outlasted its leadership, and the site
	// may be the primary its successor chose since. Confirmed after the
	// dial, and the fence runs within the leadership confirmed.
	ctx, lcancel, err := topology.ConfirmLeading(ctx)
	if err != nil {
		return "", fmt.Errorf("fence %s: %w", sp.Name, err)
	}
	defer lcancel()
	if err := o.exec(ctx, o.d.readOnlyOn...); err != nil {
		return "", err
	}
	var ro, sro int
	if err := o.db.QueryRowContext(ctx, o.d.readOnlyQuery).Scan(&ro, &sro); err != nil {
		return "", fmt.Errorf("site %s: confirm read-only: %w", sp.Name, err)
	}
	if ro == 0 {
		return "", fmt.Errorf("site %s still answers read_only=0 after it was fenced", sp.Name)
	}
	var gtid string
	if err := o.db.QueryRowContext(ctx, o.d.gtidExecuted).Scan(&gtid); err != nil {
		return "", fmt.Errorf("site %s: read GTID position: %w", sp.Name, err)
	}
	return gtid, nil
}

// Fence makes site read-only.
func (d *Driver) Fence(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name string) error {
	sp, err := siteSpec(g, name)
	if err != nil {
		return err
	}
	s, err := d.open(ctx, g, sp)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return s.exec(ctx, s.d.readOnlyOn...)
}

var _ topology.FenceRecorder = (*Driver)(nil)

// UndoTransition puts the fence row (previous, active) back on every site
// it can reach whose row is exactly (generation, target): the record of a
// transition that was rolled back. It confirms leadership first, and fails
// on a site that answers but refuses the write; a site it cannot reach
// keeps its row (its next promotion or reassertion refuses to open over
// it, which a person sees as ErrNewerFence).
func (d *Driver) UndoTransition(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, generation int64, target string, previous int64, active string) error {
	ctx, cancel, err := topology.ConfirmLeading(ctx)
	if err != nil {
		return fmt.Errorf("undo the fence of generation %d: %w", generation, err)
	}
	defer cancel()
	for _, sp := range g.Spec.Sites {
		if sp.Host == "" {
			continue
		}
		octx, ocancel := context.WithTimeout(ctx, topology.ProbeTimeout)
		s, err := d.open(octx, g, sp)
		ocancel()
		if err != nil {
			continue
		}
		_, err = s.db.ExecContext(ctx, fenceUndo, previous, active, generation, target)
		var me *gomysql.MySQLError
		if err != nil && !(errors.As(err, &me) && (me.Number == 1146 || me.Number == 1049)) {
			return fmt.Errorf("site %s: undo the fence of generation %d: %w", sp.Name, generation, err)
		}
	}
	return nil
}

// Rejoin points a fenced site at primary. A site with errant transactions
// is refused by the primary (its GTIDs are not in the primary's binary log);
// replication is then stopped, the site stays fenced, and
// ErrErrantTransactions is returned.
func (d *Driver) Rejoin(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, primary string) error {
	sp, err := siteSpec(g, name)
	if err != nil {
		return err
	}
	pp, err := siteSpec(g, primary)
	if err != nil {
		return err
	}
	ctx, cancel, err := topology.ConfirmLeading(ctx)
	if err != nil {
		return fmt.Errorf("rejoin %s: %w", name, err)
	}
	defer cancel()
	s, err := d.open(ctx, g, sp)
	if err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	acct, err := d.Credentials(ctx, g)
	if err != nil {
		return err
	}
	port := int(pp.Port)
	if port == 0 {
		port = 3306
	}
	if err := s.exec(ctx, append(s.d.readOnlyOn, s.d.stopReplica, s.d.changeSourceSQL(pp.Host, port, acct.User, acct.Password, TLSRequired(g)), s.d.startReplica)...); err != nil {
		return err
	}
	// Give the IO thread a moment to connect or be refused, measured and
	// waited on the driver's clock, and no longer than ctx lasts.
	clk := d.clock()
	deadline := clk.Now().Add(rejoinWait)
	for {
		rs, err := s.replicaStatus(ctx)
		if err != nil {
			return fmt.Errorf("rejoin %s: replica status: %w", name, err)
		}
		if rs[s.d.ioRunning] == "Yes" && rs[s.d.sqlRunning] == "Yes" {
			return nil
		}
		if errno := rs[s.d.lastIOErrno]; errno == "1236" {
			_ = s.exec(ctx, s.d.stopReplica)
			return fmt.Errorf("site %s: %w", name, ErrErrantTransactions)
		}
		if !clk.Now().Before(deadline) {
			return fmt.Errorf("site %s: replication did not start within %v", name, rejoinWait)
		}
		t := clk.NewTimer(rejoinPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("rejoin %s: waiting for replication to start: %w", name, ctx.Err())
		case <-t.C():
		}
	}
}

// rejoinWait is how long Rejoin waits for the replica's threads to run (or
// for the primary to refuse it), reading its status every rejoinPoll.
const (
	rejoinWait = 5 * time.Second
	rejoinPoll = 100 * time.Millisecond
)

// UpdateSite is the data-plane step of an ordered update. Rolling a new
// server version is the platform's job (image change); the driver checks
// the site answers and replicates after it.
func (d *Driver) UpdateSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, _ string) error {
	sp, err := siteSpec(g, name)
	if err != nil {
		return err
	}
	_, err = d.open(ctx, g, sp)
	return err
}

// RestoreSite is the data-plane step of a restore-in-place. Restoring a
// backup is outside this driver; it checks the site answers.
func (d *Driver) RestoreSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, _ string) error {
	return d.UpdateSite(ctx, g, name, "")
}

// Close closes every pooled connection.
func (d *Driver) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, p := range d.dbs {
		p.db.Close()
		delete(d.dbs, k)
	}
}
