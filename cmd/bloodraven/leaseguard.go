package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shipstream/bloodraven/store/leasestore"
)

// leaseGuardInterval is how often the operator checks again that the lease
// guard policy stands.
const leaseGuardInterval = time.Minute

// leaseGuardCheck reports whether the ValidatingAdmissionPolicy that keeps
// deployment Leases the operator's alone (docs/leases.md) is installed and bound
// to deny: at start (a warning when it is not) and every minute after,
// through the gauge bloodraven_lease_guard_policy_present. Without it, the
// record MAC is the only defence: forged records hold nothing, but anyone
// with Lease write access can still delete a lease or a tombstone.
type leaseGuardCheck struct {
	kube    kubernetes.Interface
	name    string
	present prometheus.Gauge
	log     logr.Logger
}

var _ manager.LeaderElectionRunnable = (*leaseGuardCheck)(nil)

func newLeaseGuardCheck(cfg *rest.Config, name string, reg prometheus.Registerer, log logr.Logger) (*leaseGuardCheck, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("lease guard check: %w", err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bloodraven_lease_guard_policy_present",
		Help: "1 when the ValidatingAdmissionPolicy that lets only the operator write deployment Leases is installed and bound to deny, 0 otherwise (or when it cannot be read).",
	})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &leaseGuardCheck{kube: kube, name: name, present: g, log: log}, nil
}

// NeedLeaderElection: every replica reports it.
func (c *leaseGuardCheck) NeedLeaderElection() bool { return false }

// Start checks now and every leaseGuardInterval until ctx ends, warning
// when the policy goes missing.
func (c *leaseGuardCheck) Start(ctx context.Context) error {
	wasPresent := true
	for {
		why := c.check(ctx)
		if why == "" {
			c.present.Set(1)
			if !wasPresent {
				c.log.Info("lease guard policy found", "policy", c.name)
			}
		} else {
			c.present.Set(0)
			if wasPresent {
				c.log.Info("WARNING: deployment Leases are not guarded: anyone with write access to Leases in a group's namespace can delete deployment leases and tombstones (forged records are ignored by their MAC). Install the chart's lease guard policy.",
					"policy", c.name, "reason", why)
			}
		}
		wasPresent = why == ""
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(leaseGuardInterval):
		}
	}
}

// check is why the guard does not stand, "" when it does.
func (c *leaseGuardCheck) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		return describe("ValidatingAdmissionPolicy", c.name, err)
	}
	if p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		return fmt.Sprintf("ValidatingAdmissionPolicy %s does not fail closed", c.name)
	}
	b, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		return describe("ValidatingAdmissionPolicyBinding", c.name, err)
	}
	if b.Spec.PolicyName != c.name {
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s binds %q, not the lease guard", c.name, b.Spec.PolicyName)
	}
	for _, a := range b.Spec.ValidationActions {
		if a == admissionregistrationv1.Deny {
			return ""
		}
	}
	return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s does not deny", c.name)
}

func describe(kind, name string, err error) string {
	if apierrors.IsNotFound(err) {
		return kind + " " + name + " is missing"
	}
	return fmt.Sprintf("%s %s cannot be read: %v", kind, name, err)
}

// unverifiedRecords logs and counts deployment lease records whose MAC does
// not verify (leasestore.Store.OnUnverified): each version of an object
// once.
func unverifiedRecords(reg prometheus.Registerer, log logr.Logger) (leasestore.Unverified, error) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bloodraven_lease_records_unverified_total",
		Help: "Deployment lease records read whose MAC did not verify (written by someone other than the operator); each holds nothing, defers nothing and is never revived.",
	})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return func(namespace, name, why string) {
		c.Inc()
		log.Info("ignoring a deployment lease record the operator did not write", "namespace", namespace, "lease", name, "reason", why)
	}, nil
}
