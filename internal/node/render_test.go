package node

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestTheNodesConfigurationIsWhatTheGoldenFilesSay pins every file the
// node writes for its components: a change to one shows as a diff to
// review (go test ./internal/node -update rewrites them).
func TestTheNodesConfigurationIsWhatTheGoldenFilesSay(t *testing.T) {
	l := Layout{Root: "/src/bloodraven", StateDir: "/src/bloodraven/.dev/cluster"}
	files := map[string][]byte{
		"containerd.toml": ContainerdConfig(l),
		CNIConfigName:     CNIConfig(),
		"kubelet.yaml":    KubeletConfig(l, DefaultPorts),
		"kube-proxy.yaml": KubeProxyConfig(l, DefaultPorts),
		"Corefile":        []byte(Corefile()),
		"resolv.conf":     ResolvConf(),
	}
	for name, got := range files {
		t.Run(name, func(t *testing.T) {
			golden := filepath.Join("testdata", name)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run: go test ./internal/node -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s; run go test ./internal/node -update and review the diff:\n%s", name, golden, got)
			}
		})
	}
}

// TestRemovingTheNodesChainsTouchesNothingElse: the iptables-restore
// script deletes the built-in chains' jumps into the node's chains and the
// node's chains, and leaves every other rule and chain alone.
func TestRemovingTheNodesChainsTouchesNothingElse(t *testing.T) {
	tests := []struct {
		name, save, want string
		changed          bool
	}{
		{
			name:    "a host without the node's chains is left alone",
			save:    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A INPUT -s 10.0.0.1/32 -j DROP\nCOMMIT\n",
			changed: false,
		},
		{
			name: "jumps from built-in chains are deleted, owned chains flushed then removed",
			save: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n:BLOODRAVEN-NODE - [0:0]\n:MINE - [0:0]\n" +
				"-A INPUT -j MINE\n" +
				"-A FORWARD -j BLOODRAVEN-NODE\n" +
				"-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n" +
				"-A KUBE-FORWARD -j ACCEPT\n" +
				"-A BLOODRAVEN-NODE -i brnode0 ! -o brnode0 -j DROP\n" +
				"COMMIT\n",
			want: "*filter\n" +
				"-D FORWARD -j BLOODRAVEN-NODE\n" +
				"-D FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n" +
				"-F KUBE-FORWARD\n-F BLOODRAVEN-NODE\n" +
				"-X KUBE-FORWARD\n-X BLOODRAVEN-NODE\n" +
				"COMMIT\n",
			changed: true,
		},
		{
			name: "each table gets its own transaction",
			save: "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n" +
				"*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n" +
				"*mangle\n:CNI-HOSTPORT-MASQ - [0:0]\nCOMMIT\n",
			want: "*nat\n-D PREROUTING -j KUBE-SERVICES\n-F KUBE-SERVICES\n-X KUBE-SERVICES\nCOMMIT\n" +
				"*mangle\n-F CNI-HOSTPORT-MASQ\n-X CNI-HOSTPORT-MASQ\nCOMMIT\n",
			changed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := chainRemovalScript(tc.save)
			if changed != tc.changed || got != tc.want {
				t.Errorf("chainRemovalScript:\n%s(changed %v)\nwant:\n%s(changed %v)", got, changed, tc.want, tc.changed)
			}
		})
	}
}
