package main

import (
	"context"
	"io"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// One command tree: the root's help lists every command, and each command
// is reached by its name with its own flags.
func TestOneCommandTreeListsAndReachesEveryCommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"the root's help lists the commands and the operator's flags", []string{"--help"}, 0,
			[]string{"deploy ", "check-install ", "check-lease-guard ", "-leader-elect", "-zap-log-level"}},
		{"deploy is the pipeline client", []string{"deploy", "--help"}, 0, []string{"mark-ddl", "status"}},
		{"check-install has its own flags", []string{"check-install", "--help"}, 0, []string{"-status-url"}},
		{"check-lease-guard has its own flags", []string{"check-lease-guard", "--help"}, 0, []string{"-lease-guard-policy", "-kubeconfig"}},
		{"an unknown flag of the operator is an error", []string{"--no-such-flag"}, 1, []string{"no-such-flag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code := -1
			root := newRootCommand(&out, &out, func(c int) { code = c })
			root.SetArgs(tc.args)
			if c := exitCode(root.Execute(), &out); code == -1 {
				code = c
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.wantCode, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// check-lease-guard answers what the API server holds: a missing policy, a
// binding that only warns, and the guard standing.
func TestCheckLeaseGuardReadsThePolicyAndItsBinding(t *testing.T) {
	ctx := context.Background()
	name := "guard-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[:20]
	kube := kubernetes.NewForConfigOrDie(env.Config)
	vaps := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	check := func() error { return checkLeaseGuardOnce(env.Config, name, io.Discard) }

	if err := check(); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy "+name+" is missing") {
		t.Fatalf("no policy: %v, want it named missing", err)
	}
	fail := admissionregistrationv1.Fail
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		}}
	if _, err := vaps.Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vaps.Delete(ctx, name, metav1.DeleteOptions{}) })
	if err := check(); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicyBinding "+name+" is missing") {
		t.Fatalf("no binding: %v, want it named missing", err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}}}
	b, err := bindings.Create(ctx, b, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(ctx, name, metav1.DeleteOptions{}) })
	if err := check(); err == nil || !strings.Contains(err.Error(), "does not deny") {
		t.Fatalf("a warning binding: %v, want does not deny", err)
	}
	b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	if _, err := bindings.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatalf("the guard stands, yet: %v", err)
	}
}
