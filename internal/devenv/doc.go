// Package devenv brings up the playground behind `make dev`: a local
// kube-apiserver + etcd (the binaries `make tools` builds), the CRDs, the
// operator running as its own ServiceAccount with the generated RBAC, a
// self-signed CA and serving certificate for its TLS listener, the validating
// webhooks registered against that listener, and the demo
// scene (namespace, MysqlFailoverGroup and MysqlDatabase `playground` /
// `counter-app`, a `deploy` ServiceAccount and its token).
//
// Guarantees:
//   - Everything a user needs is at fixed paths under the state directory
//     (Paths); the playground starts from empty state on every Up.
//   - One playground per state directory: a second Up while one runs fails
//     with ErrAlreadyRunning and does not touch the running one (an flock on
//     the state directory, released by the kernel if the process dies).
//   - The operator never runs with the user's cluster-admin credentials: its
//     kubeconfig carries a TokenRequest token of bloodraven-system/bloodraven,
//     bound to config/rbac/role.yaml, so RBAC mistakes show up here first.
//   - Down stops every process Up started. If the process that called Up
//     dies instead (a panicking test, SIGKILL), the kernel kills
//     kube-apiserver, etcd, mariadbd and the operator with it
//     (internal/childproc: a parent-death signal set on a thread that lives
//     as long as the process).
//   - The control plane can be disturbed on purpose and recovers with its
//     state: KillAPIServer/StartAPIServer (same address, certificates and
//     service-account keys: every kubeconfig and token keeps working) and
//     RestartEtcd (same data directory).
//
// Files by concern: devenv.go (Up, Down, the state directory),
// controlplane.go, identity.go (the operator's ServiceAccount and
// kubeconfig), certs.go, sites.go (MariaDB), webhooks.go, operator.go (one
// operator process), supervise.go (restarting it), scene.go (the demo
// objects).
//
// Not guaranteed: this is a development playground. There is no kubelet, no
// controller-manager (no garbage collection) and no persistence across runs;
// the two MariaDB sites (iad, pdx; GTID replication) run on loopback with
// their data under the state directory.
package devenv
