package node

import (
	"fmt"
	"path/filepath"
)

// The node's network: everything stays on this machine. Pods get addresses
// on a bridge of their own; Services get addresses in a range no interface
// carries (kube-proxy's rules answer for them). Neither range is routed off
// the machine: there is no default route in a Pod and no masquerading.
const (
	// NodeName is the Node object's name (the kubelet's --hostname-override).
	NodeName = "bloodraven-node"
	// Bridge is the Linux bridge the Pods' veths join; NodeIP is its
	// address, the Pods' gateway and the node's InternalIP.
	Bridge  = "brnode0"
	NodeIP  = "10.244.0.1"
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR holds every ClusterIP; APIServiceIP is the first
	// (Service default/kubernetes), DNSServiceIP kube-system/kube-dns's.
	ServiceCIDR  = "10.96.0.0/24"
	APIServiceIP = "10.96.0.1"
	DNSServiceIP = "10.96.0.10"
	// ClusterDomain is the DNS suffix of Services.
	ClusterDomain = "cluster.local"
)

// RunDir holds what must have a short path: the container runtime's socket
// and state and the kubelet's root directory (the kubelet and the runtime
// put Unix sockets there, whose paths may not exceed 107 bytes, and a
// checkout may live anywhere). One node runs per machine (Lock), so the
// fixed path is not shared with anything else.
const RunDir = "/run/bloodraven-node"

// Layout is where a node keeps its files.
type Layout struct {
	// Root is the project checkout: bin/ and bin/node/ hold the binaries.
	Root string
	// StateDir is the node's state under the checkout (.dev/cluster): its
	// PKI, configuration, logs, etcd's data and the runtime's images.
	StateDir string
}

// Bin is a tool built by make tools (kube-apiserver, etcd, kubectl, helm).
func (l Layout) Bin(name string) string { return filepath.Join(l.Root, "bin", name) }

// NodeBin is a tool built by make node-tools.
func (l Layout) NodeBin(name string) string { return filepath.Join(l.Root, "bin", "node", name) }

// CNIBinDir holds the CNI plugins.
func (l Layout) CNIBinDir() string { return filepath.Join(l.Root, "bin", "node", "cni") }

// State is a path under the state directory.
func (l Layout) State(elem ...string) string {
	return filepath.Join(append([]string{l.StateDir}, elem...)...)
}

// Kubeconfig is the cluster-admin kubeconfig (DESIGN.md §8).
func (l Layout) Kubeconfig() string { return l.State("kubeconfig") }

// OperatorCA is the CA of the operator's TLS listener (DESIGN.md §8).
func (l Layout) OperatorCA() string { return l.State("ca.crt") }

// ContainerdSocket is the CRI endpoint.
func ContainerdSocket() string { return filepath.Join(RunDir, "containerd.sock") }

// KubeletRootDir is the kubelet's --root-dir.
func KubeletRootDir() string { return filepath.Join(RunDir, "kubelet") }

// ContainerdStateDir is containerd's state directory.
func ContainerdStateDir() string { return filepath.Join(RunDir, "containerd") }

// CNIStateDir is host-local IPAM's data directory and the CNI result cache.
func CNIStateDir() string { return filepath.Join(RunDir, "cni") }

// checkSocketPaths refuses paths a Unix socket cannot have.
func checkSocketPaths(paths ...string) error {
	for _, p := range paths {
		if len(p) > 107 {
			return fmt.Errorf("socket path %s is %d bytes; Unix sockets allow 107", p, len(p))
		}
	}
	return nil
}
