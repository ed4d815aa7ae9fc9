package devenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/scene"
)

func (p *Playground) createScene(ctx context.Context, c client.Client, kube kubernetes.Interface) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: PlaygroundNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DeployServiceAccount, Namespace: PlaygroundNamespace}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: MySQLSecret, Namespace: PlaygroundNamespace},
			StringData: map[string]string{"username": MySQLUser, "password": MySQLPassword},
		},
		p.playgroundGroup(),
		scene.Database(PlaygroundNamespace, DatabaseName, GroupName,
			bloodravenv1alpha1.DeploymentClient{Namespace: PlaygroundNamespace, ServiceAccount: DeployServiceAccount}),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			if _, ns := o.(*corev1.Namespace); ns && apierrors.IsAlreadyExists(err) {
				continue // the namespaced install's RBAC made it
			}
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	token, err := scene.Token(ctx, kube, PlaygroundNamespace, DeployServiceAccount, []string{DeployAudience}, 24*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p.Paths.DeployToken, []byte(token), 0o600); err != nil {
		return err
	}
	p.logf(">> playground scene created: group %s/%s, database %s, deploy token for %s/%s", PlaygroundNamespace, GroupName, DatabaseName, PlaygroundNamespace, DeployServiceAccount)
	// Hand over a bootstrapped group: until then grants would meet the
	// bootstrap transition (423) and be fenced by generation 1 right after.
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: PlaygroundNamespace, Name: GroupName}, g)
		return err == nil && g.Status.TopologyGeneration >= 1 && g.Status.Transition == nil, nil
	})
	if err != nil {
		return fmt.Errorf("group %s/%s not bootstrapped after 60s (%w); see %s", PlaygroundNamespace, GroupName, err, p.Paths.OperatorLog)
	}
	p.logf(">> group bootstrapped: active site %s, topologyGeneration %d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	return nil
}

// playgroundGroup is the demo group: iad and pdx on the loopback MariaDB
// sites (or on what stands in front of them, Config.SitePorts), with the
// playground's MariaDB account.
func (p *Playground) playgroundGroup() *bloodravenv1alpha1.MysqlFailoverGroup {
	g := scene.Group(PlaygroundNamespace, GroupName,
		bloodravenv1alpha1.Site{Name: "iad", Host: "127.0.0.1", Port: int32(p.cfg.SitePorts[0])},
		bloodravenv1alpha1.Site{Name: "pdx", Host: "127.0.0.1", Port: int32(p.cfg.SitePorts[1])})
	g.Spec.CredentialsSecretRef = &bloodravenv1alpha1.SecretReference{Name: MySQLSecret}
	return g
}
