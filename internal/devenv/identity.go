package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/scene"
)

// installOperatorIdentity creates the operator's namespace, ServiceAccount
// and RBAC (config/rbac/role.yaml, generated) and writes a kubeconfig that
// authenticates as that ServiceAccount.
func (p *Playground) installOperatorIdentity(ctx context.Context, c client.Client, kube kubernetes.Interface) error {
	data, err := os.ReadFile(filepath.Join(p.cfg.Root, "config", "rbac", "role.yaml"))
	if err != nil {
		return fmt.Errorf("operator RBAC: %w", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return fmt.Errorf("operator RBAC %s: %w", "config/rbac/role.yaml", err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		},
	}
	objs = append(objs, recordKeyRole()...)
	if p.cfg.OperatorRBAC != nil {
		// The namespaced install: the given RBAC (the chart's rendering,
		// in tests) instead of the cluster-wide role; the namespaces its
		// Roles live in are created first.
		objs = []client.Object{objs[0], objs[1]}
		seen := map[string]bool{OperatorNamespace: true}
		for _, o := range p.cfg.OperatorRBAC {
			if ns := o.GetNamespace(); ns != "" && !seen[ns] {
				seen[ns] = true
				objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			}
		}
		objs = append(objs, p.cfg.OperatorRBAC...)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	token, err := scene.Token(ctx, kube, OperatorNamespace, OperatorServiceAccount, nil, 7*24*time.Hour)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["playground"] = &clientcmdapi.Cluster{Server: p.AdminConfig.Host, CertificateAuthorityData: p.AdminConfig.CAData}
	kc.AuthInfos["bloodraven"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["bloodraven"] = &clientcmdapi.Context{Cluster: "playground", AuthInfo: "bloodraven", Namespace: OperatorNamespace}
	kc.CurrentContext = "bloodraven"
	out, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("operator kubeconfig: %w", err)
	}
	return pki.WriteFileAtomic(p.Paths.OperatorKubeconfig, out, 0o600)
}

// recordKeyRole lets the operator create its record-MAC key Secret
// (RecordKeySecret) in its namespace and read that Secret: the Role the
// chart renders.
func recordKeyRole() []client.Object {
	return []client.Object{
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: RecordKeySecret, Namespace: OperatorNamespace},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{RecordKeySecret}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: RecordKeySecret, Namespace: OperatorNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RecordKeySecret},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		},
	}
}

// OperatorIdentity is the user name the operator authenticates as.
func OperatorIdentity() string {
	return "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
}
