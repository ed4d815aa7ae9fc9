// Package nodesuite runs the product as its users do, on the single-node
// Kubernetes of internal/node: the chart installed by helm from make
// image's images, its Pods behind Services that kube-proxy routes, its
// NetworkPolicy enforced, and pipelines as Pods with kubelet-projected
// tokens. It needs root (the node prepares the host) and make node-tools;
// make test runs it after every other package. One node runs per machine:
// TestMain brings it up once, and after the last test stops it and fails
// if anything of it is left on the host.
package nodesuite
