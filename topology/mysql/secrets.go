package mysql

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Keys of the Secrets a group names.
const (
	UsernameKey = "username"
	PasswordKey = "password"
	CAKey       = "ca.crt"
	CertKey     = corev1.TLSCertKey       // tls.crt
	KeyKey      = corev1.TLSPrivateKeyKey // tls.key
)

// FromSecrets is the operator's Credentials: a GET of each Secret the group
// names, in the group's namespace. spec.credentialsSecretRef gives username
// and password (which may be empty); when spec.tls requires TLS, spec.tls.caSecretRef gives
// ca.crt and spec.tls.clientCertificateSecretRef, when set, tls.crt and
// tls.key. A missing Secret or key is an error naming it; nothing is read
// from a Secret the group does not name. Wrap it in a CredentialCache
// (NewCached) so that a group's Secrets are read once per TTL.
func FromSecrets(api client.Reader) Credentials {
	return func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) {
		ref := g.Spec.CredentialsSecretRef
		if ref == nil {
			return Account{}, fmt.Errorf("group %s/%s has no spec.credentialsSecretRef", g.Namespace, g.Name)
		}
		data, err := secretKeys(ctx, api, g.Namespace, ref.Name, "spec.credentialsSecretRef", UsernameKey)
		if err != nil {
			return Account{}, err
		}
		a := Account{User: string(data[UsernameKey]), Password: string(data[PasswordKey])}
		if !TLSRequired(g) {
			return a, nil
		}
		t := g.Spec.TLS
		if t.CASecretRef == nil {
			return Account{}, fmt.Errorf("group %s/%s: spec.tls.mode is Required and spec.tls.caSecretRef is not set", g.Namespace, g.Name)
		}
		ca, err := secretKeys(ctx, api, g.Namespace, t.CASecretRef.Name, "spec.tls.caSecretRef", CAKey)
		if err != nil {
			return Account{}, err
		}
		a.TLS = &TLSMaterial{CA: ca[CAKey]}
		if ref := t.ClientCertificateSecretRef; ref != nil {
			pair, err := secretKeys(ctx, api, g.Namespace, ref.Name, "spec.tls.clientCertificateSecretRef", CertKey, KeyKey)
			if err != nil {
				return Account{}, err
			}
			a.TLS.ClientCert, a.TLS.ClientKey = pair[CertKey], pair[KeyKey]
		}
		return a, nil
	}
}

// secretKeys GETs one Secret and checks that it has keys.
func secretKeys(ctx context.Context, api client.Reader, ns, name, field string, keys ...string) (map[string][]byte, error) {
	var sec corev1.Secret
	if err := api.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		return nil, fmt.Errorf("%s: Secret %s/%s: %w", field, ns, name, err)
	}
	for _, k := range keys {
		if len(sec.Data[k]) == 0 {
			return nil, fmt.Errorf("%s: Secret %s/%s has no key %s", field, ns, name, k)
		}
	}
	return sec.Data, nil
}
