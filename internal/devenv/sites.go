package devenv

import (
	"context"
	"path/filepath"

	"github.com/shipstream/bloodraven/internal/mariadblocal"
)

// Credentials of the playground's MariaDB administrative account, kept in
// the Secret playground/playground-mysql.
const (
	MySQLUser     = "bloodraven"
	MySQLPassword = "playground-only"
	MySQLSecret   = "playground-mysql"
)

// startSites starts the iad and pdx MariaDB servers, pdx replicating from
// iad with GTIDs.
func (p *Playground) startSites(ctx context.Context) error {
	p.logf(">> starting MariaDB sites iad (127.0.0.1:%d) and pdx (127.0.0.1:%d)", p.cfg.MySQLPorts[0], p.cfg.MySQLPorts[1])
	for i, name := range []string{"iad", "pdx"} {
		s, err := mariadblocal.Start(ctx, filepath.Join(p.cfg.StateDir, "mysql", name), name, p.cfg.MySQLPorts[i], i+1, MySQLUser, MySQLPassword)
		if err != nil {
			return err
		}
		p.Sites = append(p.Sites, s)
	}
	return p.Sites[1].ReplicateFrom(ctx, p.Sites[0])
}
