package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// The host changes a node makes, and undoes: kernel settings, the bridge,
// iptables chains (its own, kube-proxy's, kube-router's and the CNI
// plugins'), ipsets, the cgroup every Pod lives under, and the mounts the
// runtime and the kubelet make. Prepare records what it changed; Teardown
// undoes all of it, including what a node killed with SIGKILL left behind,
// and Leftovers lists whatever is still there.

// Sysctls the node sets or the kubelet may set (with
// protectKernelDefaults false it writes vm.overcommit_memory,
// kernel.panic and kernel.panic_on_oops): Prepare saves their values and
// Teardown restores them.
var savedSysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"vm/overcommit_memory",
	"kernel/panic",
	"kernel/panic_on_oops",
}

// nodeSysctls are what the node needs: forwarding between the bridge and
// the node (Service traffic is DNATed and forwarded), and bridged traffic
// through iptables (kube-proxy and the NetworkPolicy engine see Pod-to-Pod
// packets).
var nodeSysctls = map[string]string{
	"net/ipv4/ip_forward":                "1",
	"net/bridge/bridge-nf-call-iptables": "1",
}

// cgroupHierarchies are the cgroup v1 hierarchies the Pods' cgroup is made
// in. The kubelet requires cpu, cpuacct, cpuset and memory; the others
// carry the Pods' limits (pids), devices and freezing.
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd"}

// cgroupCleanup are the hierarchies Teardown removes the Pods' cgroup
// from: runc also makes each container's cgroup in the cgroup2 hierarchy
// of this hybrid host (seen with containerd 2.4.2 and runc 1.5.3).
var cgroupCleanup = append(slices.Clone(cgroupHierarchies), "unified")

// containerdRunDir is where containerd's shims keep their sockets and
// FIFOs whatever the configured state directory (/run/containerd/s,
// fifo, runc): Teardown removes it. Nothing else on this machine kind runs
// containerd.
const containerdRunDir = "/run/containerd"

// chainPrefixes name the iptables chains the node's components create:
// kube-proxy (KUBE-), kube-router (KUBE-ROUTER-, KUBE-POD-FW-, KUBE-NWPLCY-,
// all KUBE-), the CNI plugins (CNI-) and the node's own guard.
var chainPrefixes = []string{"KUBE-", "CNI-", guardChain}

// ipsetPrefixes name kube-router's ipsets.
var ipsetPrefixes = []string{"KUBE-", "kube-router"}

// guardChain keeps the node's Pods on this machine: nothing is forwarded
// between the bridge and any other interface.
const guardChain = "BLOODRAVEN-NODE"

func sysctlPath(name string) string { return filepath.Join("/proc/sys", name) }

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(name, value string) error {
	if err := os.WriteFile(sysctlPath(name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

// run runs a host command and returns its combined output.
func run(name string, args ...string) ([]byte, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// savedSysctlsFile is where Prepare writes the host's values: beside the
// lock, not in the state directory, so that a Teardown after a crash
// restores them whichever state directory the crashed node had (the node
// suite's is a fresh temporary one each run).
func (l Layout) savedSysctlsFile() string { return "/run/bloodraven-node.sysctls.json" }

// Prepare makes the host ready for a node: it saves and sets the kernel
// settings, creates the bridge with NodeIP, installs the guard chain and
// creates the Pods' cgroup in every hierarchy. It expects a clean host:
// call Teardown first.
func Prepare(l Layout) error {
	for _, tool := range []string{"ip", "iptables", "iptables-save", "iptables-restore", "ipset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: install the Debian packages iptables and ipset (.ci/run does)", tool)
		}
	}
	if err := os.MkdirAll(l.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	// Saved once: a second Prepare after a crash must not save the node's
	// own values as the host's.
	if _, err := os.Stat(l.savedSysctlsFile()); errors.Is(err, os.ErrNotExist) {
		saved := map[string]string{}
		for _, name := range savedSysctls {
			v, err := readSysctl(name)
			if err != nil {
				return err
			}
			saved[name] = v
		}
		b, _ := json.Marshal(saved)
		if err := os.WriteFile(l.savedSysctlsFile(), b, 0o600); err != nil {
			return fmt.Errorf("save sysctls: %w", err)
		}
	}
	for name, v := range nodeSysctls {
		if err := writeSysctl(name, v); err != nil {
			return err
		}
	}
	if _, err := run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
		return err
	}
	if _, err := run("ip", "addr", "add", NodeIP+"/24", "dev", Bridge); err != nil {
		return err
	}
	if _, err := run("ip", "link", "set", Bridge, "up"); err != nil {
		return err
	}
	if err := installGuard(); err != nil {
		return err
	}
	for _, h := range cgroupHierarchies {
		if err := makeCgroup(h, CgroupRoot); err != nil {
			return err
		}
	}
	return os.MkdirAll(RunDir, 0o700)
}

// installGuard adds the guard chain at the top of FORWARD: a packet from
// the bridge to another interface, or from another interface to the
// bridge, is dropped. Pod-to-Pod (bridged), Pod-to-node and node-to-Pod
// traffic never crosses it.
func installGuard() error {
	rules := [][]string{
		{"-N", guardChain},
		{"-A", guardChain, "-i", Bridge, "!", "-o", Bridge, "-j", "DROP"},
		{"-A", guardChain, "!", "-i", Bridge, "-o", Bridge, "-j", "DROP"},
		{"-I", "FORWARD", "1", "-j", guardChain},
	}
	for _, r := range rules {
		if _, err := run("iptables", r...); err != nil {
			return err
		}
	}
	return nil
}

func makeCgroup(hierarchy, path string) error {
	dir := filepath.Join("/sys/fs/cgroup", hierarchy, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup %s:%s: %w", hierarchy, path, err)
	}
	if hierarchy != "cpuset" {
		return nil
	}
	// A new cpuset has no CPUs and no memory nodes: nothing could run in
	// it (ENOSPC). Copy the parent's.
	parent := filepath.Dir(dir)
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		v, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return fmt.Errorf("cgroup cpuset: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
			return fmt.Errorf("cgroup cpuset %s: %w", f, err)
		}
	}
	return nil
}

// Teardown undoes Prepare and everything the node's components left: it
// kills every process in the Pods' cgroup and every containerd shim of the
// node, unmounts what is mounted under RunDir and the state directory,
// deletes the bridge, the node's iptables chains and ipsets and the Pods'
// cgroups, restores the saved kernel settings and removes RunDir. It is
// idempotent, does every step even when one fails, and returns the errors
// of all of them. The node's own processes (containerd, the kubelet...)
// must be stopped first.
func Teardown(l Layout) error {
	var errs []error
	errs = append(errs, killCgroup(CgroupRoot)...)
	errs = append(errs, killShims()...)
	errs = append(errs, unmountUnder(RunDir, l.StateDir, containerdRunDir)...)
	if linkExists(Bridge) {
		if _, err := run("ip", "link", "del", Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeChains("iptables")...)
	if _, err := exec.LookPath("ip6tables"); err == nil {
		errs = append(errs, removeChains("ip6tables")...)
	}
	errs = append(errs, destroyIPSets()...)
	for _, h := range cgroupCleanup {
		if err := removeCgroupTree(filepath.Join("/sys/fs/cgroup", h, CgroupRoot)); err != nil {
			errs = append(errs, err)
		}
	}
	if b, err := os.ReadFile(l.savedSysctlsFile()); err == nil {
		saved := map[string]string{}
		if err := json.Unmarshal(b, &saved); err != nil {
			errs = append(errs, fmt.Errorf("saved sysctls: %w", err))
		}
		restored := true
		for name, v := range saved {
			if err := writeSysctl(name, v); err != nil {
				errs = append(errs, err)
				restored = false
			}
		}
		if restored {
			_ = os.Remove(l.savedSysctlsFile())
		}
	}
	for _, d := range []string{RunDir, containerdRunDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// killCgroup SIGKILLs every process in a cgroup tree of the pids
// hierarchy (every Pod's processes, pause included), until none is left.
func killCgroup(path string) []error {
	root := filepath.Join("/sys/fs/cgroup/pids", path)
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	var errs []error
	for attempt := 0; attempt < 50; attempt++ {
		pids := cgroupProcs(root)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d in cgroup %s: %w", pid, path, err))
			}
		}
		sleep100ms()
	}
	return append(errs, fmt.Errorf("processes still in cgroup %s: %v", path, cgroupProcs(root)))
}

func cgroupProcs(root string) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killShims SIGKILLs the containerd shims of this node: they detach from
// containerd (their parent is init), so neither containerd's exit nor a
// parent-death signal ends them. They are found by the address of the
// node's containerd on their command line.
func killShims() []error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []error{fmt.Errorf("list processes: %w", err)}
	}
	var errs []error
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" || !slices.Contains(args, ContainerdSocket()) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	return errs
}

// mountsUnder lists the mount points under any of dirs, deepest first.
func mountsUnder(dirs ...string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		for _, d := range dirs {
			if d != "" && (mp == d || strings.HasPrefix(mp, d+"/")) {
				points = append(points, mp)
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dirs ...string) []error {
	var errs []error
	// Mounts can stack (the kubelet bind-mounts its root directory onto
	// itself): repeat until none is left.
	for round := 0; round < 10; round++ {
		points, err := mountsUnder(dirs...)
		if err != nil {
			return append(errs, err)
		}
		if len(points) == 0 {
			return errs
		}
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	points, _ := mountsUnder(dirs...)
	return append(errs, fmt.Errorf("still mounted: %v", points))
}

// ownedChain says whether a chain is one the node's components create.
func ownedChain(name string) bool {
	for _, p := range chainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// removeChains deletes, in every table, the rules of built-in chains that
// jump to an owned chain, then flushes and deletes the owned chains. It
// reads iptables-save's output and writes one iptables-restore
// transaction per table that touches nothing else (--noflush).
func removeChains(iptables string) []error {
	out, err := run(iptables + "-save")
	if err != nil {
		return []error{err}
	}
	script, changed := chainRemovalScript(string(out))
	if !changed {
		return nil
	}
	cmd := exec.Command(iptables+"-restore", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if b, err := cmd.CombinedOutput(); err != nil {
		return []error{fmt.Errorf("%s-restore: %w: %s", iptables, err, bytes.TrimSpace(b))}
	}
	return nil
}

// chainRemovalScript turns iptables-save output into an iptables-restore
// --noflush script that removes every owned chain and every rule that
// refers to one. Rules inside owned chains go with their chain.
func chainRemovalScript(save string) (string, bool) {
	var b strings.Builder
	changed := false
	var table string
	var deletes, flushes, removes []string
	flush := func() {
		if table == "" || len(deletes)+len(flushes) == 0 {
			return
		}
		changed = true
		b.WriteString("*" + table + "\n")
		for _, d := range deletes {
			b.WriteString(d + "\n")
		}
		for _, f := range flushes {
			b.WriteString(f + "\n")
		}
		for _, r := range removes {
			b.WriteString(r + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
			deletes, flushes, removes = nil, nil, nil
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(strings.TrimPrefix(line, ":"))[0]
			if ownedChain(name) {
				flushes = append(flushes, "-F "+name)
				removes = append(removes, "-X "+name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			chain := fields[1]
			if ownedChain(chain) {
				continue // flushed with its chain
			}
			if refersToOwned(fields) {
				deletes = append(deletes, "-D"+strings.TrimPrefix(line, "-A"))
			}
		case line == "COMMIT":
			flush()
			table = ""
		}
	}
	return b.String(), changed
}

// refersToOwned says whether a rule jumps or goes to an owned chain.
func refersToOwned(fields []string) bool {
	for i := 0; i+1 < len(fields); i++ {
		if (fields[i] == "-j" || fields[i] == "-g") && ownedChain(fields[i+1]) {
			return true
		}
	}
	return false
}

func ownedIPSets() ([]string, error) {
	out, err := run("ipset", "list", "-n")
	if err != nil {
		return nil, err
	}
	var sets []string
	for _, name := range strings.Fields(string(out)) {
		for _, p := range ipsetPrefixes {
			if strings.HasPrefix(name, p) {
				sets = append(sets, name)
				break
			}
		}
	}
	return sets, nil
}

func destroyIPSets() []error {
	if _, err := exec.LookPath("ipset"); err != nil {
		return nil
	}
	sets, err := ownedIPSets()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, s := range sets {
		if _, err := run("ipset", "destroy", s); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// removeCgroupTree removes a cgroup and its children, deepest first; a
// cgroup with processes left cannot be removed.
func removeCgroupTree(root string) error {
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what a node left on this machine: its bridge, veths on
// it, mounts under RunDir or the state directory, owned iptables chains,
// ipsets, the Pods' cgroups, RunDir, kernel settings not restored, and
// containerd shims. Empty after a Teardown.
func Leftovers(l Layout) []string {
	var left []string
	if linkExists(Bridge) {
		left = append(left, "bridge "+Bridge)
	}
	if links, err := filepath.Glob("/sys/class/net/veth*"); err == nil && len(links) > 0 {
		for _, link := range links {
			left = append(left, "veth "+filepath.Base(link))
		}
	}
	if points, err := mountsUnder(RunDir, l.StateDir); err == nil {
		for _, p := range points {
			left = append(left, "mount "+p)
		}
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(ipt + "-save").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, ":") {
				if name := strings.Fields(line[1:])[0]; ownedChain(name) {
					left = append(left, ipt+" chain "+name)
				}
			}
		}
	}
	if _, err := exec.LookPath("ipset"); err == nil {
		if sets, err := ownedIPSets(); err == nil {
			for _, s := range sets {
				left = append(left, "ipset "+s)
			}
		}
	}
	for _, h := range cgroupCleanup {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, CgroupRoot)); err == nil {
			left = append(left, "cgroup "+h+":"+CgroupRoot)
		}
	}
	if _, err := os.Stat(RunDir); err == nil {
		left = append(left, "directory "+RunDir)
	}
	if _, err := os.Stat(l.savedSysctlsFile()); err == nil {
		left = append(left, "kernel settings not restored ("+l.savedSysctlsFile()+")")
	}
	return append(left, runningShims()...)
}

// runningShims names the node's running shims.
func runningShims() []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var shims []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "containerd-shim-runc-v2" && slices.Contains(args, ContainerdSocket()) {
			shims = append(shims, "containerd shim pid "+e.Name())
		}
	}
	return shims
}
