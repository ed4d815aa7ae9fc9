// Package clusterenv is make cluster: the single-node Kubernetes of
// internal/node with the product installed on it as a platform team
// installs it (DESIGN.md §8): make image's images imported, the chart
// installed by helm as release bloodraven in namespace bloodraven (two
// replicas, the webhooks, the deployment API and its NetworkPolicy, the TLS
// listener's certificate from an existing Secret), the playground's MariaDB
// sites as host processes that the Pods reach on the node's address, and
// the playground's group and database.
//
// It guarantees that a rerun starts clean (the node's state directory is
// recreated) and that Stop leaves nothing of the node on the host. It does
// not share anything with make dev's playground but the MariaDB ports: the
// two need not run at the same time.
package clusterenv
