package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/shipstream/bloodraven/internal/testenv"
)

func TestParseOptions(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		check   func(t *testing.T, o options)
		wantErr string
	}{
		"defaults": {
			check: func(t *testing.T, o options) {
				if o.tlsAddr != ":8443" || o.auxAddr != ":8082" || o.metricsAddr != ":8080" || o.probeAddr != ":8081" {
					t.Errorf("addresses = %s %s %s %s", o.tlsAddr, o.auxAddr, o.metricsAddr, o.probeAddr)
				}
				if !o.leaderElection || o.deployAPI || o.deployAudience != "bloodraven-deploy" || o.zap.Development {
					t.Errorf("defaults = %+v", o)
				}
				if o.kubeQPS < 100 {
					t.Errorf("kube QPS %v would throttle the deployment API", o.kubeQPS)
				}
			},
		},
		"env sets the TLS address and the deploy API": {
			env: map[string]string{envTLSAddr: "127.0.0.1:9443", envDeployAPI: "true", envDeployAudience: "aud", envLeaderElectNS: "bloodraven-system"},
			check: func(t *testing.T, o options) {
				if o.tlsAddr != "127.0.0.1:9443" || !o.deployAPI || o.deployAudience != "aud" || o.leaderElectionNS != "bloodraven-system" {
					t.Errorf("options = %+v", o)
				}
			},
		},
		"controller-runtime's logging flags set the level and the encoder": {
			args: []string{"--zap-log-level=debug", "--zap-encoder=console"},
			check: func(t *testing.T, o options) {
				if o.zap.Level == nil || !o.zap.Level.Enabled(zapcore.DebugLevel) || o.zap.NewEncoder == nil {
					t.Errorf("zap options = %+v", o.zap)
				}
			},
		},
		"the deployment API's fair share defaults to what no pipeline reaches, and is set by flags": {
			check: func(t *testing.T, o options) {
				if f := o.deployFairShare; f.Rate != 50 || f.Burst != 100 || f.InFlight != 16 || f.HeldGets != 64 || f.Reads != 4 {
					t.Errorf("fair share defaults = %+v", f)
				}
			},
		},
		"fair share flags": {
			args: []string{"--deploy-api-rate-per-identity=2.5", "--deploy-api-burst-per-identity=5", "--deploy-api-inflight-per-identity=3", "--deploy-api-held-gets-per-identity=1", "--deploy-api-reads-per-identity=2"},
			check: func(t *testing.T, o options) {
				if f := o.deployFairShare; f.Rate != 2.5 || f.Burst != 5 || f.InFlight != 3 || f.HeldGets != 1 || f.Reads != 2 {
					t.Errorf("fair share = %+v", f)
				}
			},
		},
		"a zero fair share limit is refused": {
			args:    []string{"--deploy-api-inflight-per-identity=0"},
			wantErr: "--deploy-api-inflight-per-identity",
		},
		"zero read slots are refused": {
			args:    []string{"--deploy-api-reads-per-identity=0"},
			wantErr: "--deploy-api-reads-per-identity",
		},
		"the private -v flag is gone": {args: []string{"-v=2"}, wantErr: "flag provided but not defined: -v"},
		"a flag wins over its env variable": {
			args: []string{"--tls-bind-address=:7443"},
			env:  map[string]string{envTLSAddr: ":9443"},
			check: func(t *testing.T, o options) {
				if o.tlsAddr != ":7443" {
					t.Errorf("tlsAddr = %s", o.tlsAddr)
				}
			},
		},
		"deploy API without leader election is refused": {
			args:    []string{"--deploy-api", "--leader-elect=false"},
			wantErr: "--deploy-api needs --leader-elect",
		},
		"a malformed boolean env is refused": {
			env:     map[string]string{envDeployAPI: "yes please"},
			wantErr: envDeployAPI,
		},
		"a bad TLS address is refused": {
			args:    []string{"--tls-bind-address=8443"},
			wantErr: "TLS listener address",
		},
		"the operator identity is required": {
			env:     map[string]string{envOperatorSA: ""},
			wantErr: "--operator-identity",
		},
		"the operator's namespace is required (the record key lives there)": {
			env:     map[string]string{envLeaderElectNS: ""},
			wantErr: "--leader-election-namespace",
		},
		"watch namespaces are a deduplicated list": {
			args: []string{"--watch-namespaces=team-a, team-b,team-a"},
			check: func(t *testing.T, o options) {
				if strings.Join(o.watchNamespaces, ",") != "team-a,team-b" {
					t.Errorf("watchNamespaces = %q", o.watchNamespaces)
				}
			},
		},
		"a watch namespace that is no namespace name is refused": {
			args:    []string{"--watch-namespaces=Team_A"},
			wantErr: "Team_A",
		},
		"a throttling QPS is refused": {
			args:    []string{"--kube-api-qps=20"},
			wantErr: "too low",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			getenv := func(k string) string {
				if v, ok := tc.env[k]; ok {
					return v
				}
				switch k {
				case envOperatorSA:
					return "system:serviceaccount:bloodraven-system:bloodraven"
				case envLeaderElectNS:
					return "bloodraven-system"
				}
				return ""
			}
			o, err := parseOptions(tc.args, getenv, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestTheDefaultLoggerWritesJSONAtInfo(t *testing.T) {
	o, err := parseOptions([]string{"--operator-identity=system:serviceaccount:bloodraven:bloodraven", "--leader-election-namespace=bloodraven"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := newLogger(o.zap, &buf)
	log.Info("visible", "k", 1)
	log.V(1).Info("debug, not written")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want the info one: %q", len(lines), buf.String())
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
		t.Fatalf("not JSON: %q", lines[0])
	}
	ts, _ := e["ts"].(string)
	if e["msg"] != "visible" || e["k"] != 1.0 || !strings.Contains(ts, "T") || !strings.Contains(ts, ".") {
		t.Fatalf("entry %v: want msg, k and an RFC 3339 time stamp with a fraction", e)
	}
}

// A flood of one message (a junk-token attack's 401s) is sampled as zap's
// production configuration samples: per second, the first 100 of a message,
// then every 100th.
func TestAFloodOfOneMessageIsSampled(t *testing.T) {
	o, err := parseOptions([]string{"--operator-identity=system:serviceaccount:bloodraven:bloodraven", "--leader-election-namespace=bloodraven"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := newLogger(o.zap, &buf)
	for range 250 {
		log.Info("deploy api", "status", 401)
	}
	log.Info("another message")
	if n := strings.Count(buf.String(), "deploy api"); n < 100 || n > 102 {
		t.Fatalf("%d of 250 identical entries written, want the first 100 and about one in 100 after", n)
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Fatal("another message was dropped with the flood")
	}
}

func TestVersionNeedsNoConfigurationAndIsTheRelease(t *testing.T) {
	o, err := parseOptions([]string{"--version"}, func(string) string { return "" }, io.Discard)
	if err != nil || !o.printVersionAndExit {
		t.Fatalf("--version without any configuration: %+v, %v", o, err)
	}
	release, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if v := Version(); !strings.HasPrefix(v, strings.TrimSpace(string(release))) || strings.TrimSpace(string(release)) == "" {
		t.Fatalf("Version() = %q, want the release %q", v, release)
	}
	version = "9.9.9+abc"
	defer func() { version = "" }()
	if Version() != "9.9.9+abc" {
		t.Fatal("a stamped version is not used")
	}
}
