package e2etest

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/readonly"
)

// The sampler reads the servers themselves, never through what a test puts
// in front of their ports.
func TestReadOnlySitesDSNUsesTheServersSockets(t *testing.T) {
	p := &devenv.Playground{Sites: []*mariadblocal.Server{{Name: "iad", Dir: "/state/iad", Port: 1}, {Name: "pdx", Dir: "/state/pdx", Port: 2}}}
	dsns := SitesDSN(p)
	if len(dsns) != 2 {
		t.Fatalf("DSNs %v, want iad and pdx", dsns)
	}
	for _, s := range p.Sites {
		cfg, err := mysql.ParseDSN(dsns[s.Name])
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Net != "unix" || cfg.Addr != s.Socket() || cfg.Timeout != readonly.QueryBound {
			t.Errorf("%s: net %s, addr %s, timeout %v; want unix, %s, %v", s.Name, cfg.Net, cfg.Addr, cfg.Timeout, s.Socket(), readonly.QueryBound)
		}
	}
}
