package webhook

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func group(site string, gen int64) *bloodravenv1alpha1.MysqlFailoverGroup {
	return &bloodravenv1alpha1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec:       bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}},
		Status:     bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: site, TopologyGeneration: gen},
	}
}

func TestValidateStatusChange(t *testing.T) {
	withTransition := func(g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64) *bloodravenv1alpha1.MysqlFailoverGroup {
		g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: "RestoreInPlace", TargetSite: site, Generation: gen}
		return g
	}
	tests := map[string]struct {
		old, new   *bloodravenv1alpha1.MysqlFailoverGroup
		operator   bool
		wantErrSub string // empty: allowed
	}{
		"nothing about the fence changes":           {old: group("iad", 3), new: group("iad", 3)},
		"a person writes back the status unchanged": {old: withTransition(group("iad", 3), "pdx", 4), new: withTransition(group("iad", 3), "pdx", 4)},
		"a person may not change health": {old: group("iad", 3), new: func() *bloodravenv1alpha1.MysqlFailoverGroup {
			g := group("iad", 3)
			g.Status.Health.Ready = true
			return g
		}(), wantErrSub: "status.health: Forbidden"},
		"a person may not write a transition":                  {old: group("iad", 3), new: withTransition(group("iad", 3), "pdx", 4), wantErrSub: "status.transition: Forbidden"},
		"a person may not clear a transition":                  {old: withTransition(group("iad", 3), "pdx", 4), new: group("iad", 3), wantErrSub: "status.transition: Forbidden"},
		"operator changes other status freely":                 {old: group("iad", 3), new: withTransition(group("iad", 3), "pdx", 4), operator: true},
		"a person bumps the generation":                        {old: group("iad", 3), new: group("iad", 4), wantErrSub: "lying to the fence"},
		"a person moves the active site":                       {old: group("iad", 3), new: group("pdx", 3), wantErrSub: "revoke-deployment-leases"},
		"a person does a perfect failover":                     {old: group("iad", 3), new: group("pdx", 4), wantErrSub: "only the operator"},
		"operator bootstrap 0 to 1":                            {old: group("", 0), new: group("iad", 1), operator: true},
		"operator failover bumps by one":                       {old: group("iad", 3), new: group("pdx", 4), operator: true},
		"the operator's fence moves are the fence guard's job": {old: group("pdx", 4), new: group("iad", 3), operator: true}, // TestFenceGuardThroughTheAPIServer
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateStatusChange(tc.old, tc.new, tc.operator)
			if tc.wantErrSub == "" {
				if len(errs) > 0 {
					t.Fatalf("denied: %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErrSub) {
				t.Fatalf("errors %v, want one mentioning %q", errs, tc.wantErrSub)
			}
		})
	}
}

// Every status field, including one added after this test was written, is
// the operator's alone: a change by anyone else is refused on that field's
// path with what to do instead, and the operator may make it.
func TestStatusIsTheOperatorsAloneForEveryField(t *testing.T) {
	typ := reflect.TypeOf(bloodravenv1alpha1.MysqlFailoverGroupStatus{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("status field %s has no JSON name; give it one", f.Name)
		}
		t.Run(name, func(t *testing.T) {
			oldG := group("iad", 3)
			newG := oldG.DeepCopy()
			fill(reflect.ValueOf(&newG.Status).Elem().Field(i))
			if equality.Semantic.DeepEqual(oldG.Status, newG.Status) {
				t.Fatalf("could not give status.%s a value; teach fill its kind", name)
			}
			msg := ValidateStatusChange(oldG, newG, false).ToAggregate()
			if msg == nil {
				t.Fatalf("a person's change of status.%s was allowed", name)
			}
			for _, want := range []string{"status." + name + ": Forbidden", "only the operator", bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "spec.plannedFailover"} {
				if !strings.Contains(msg.Error(), want) {
					t.Errorf("%q lacks %q", msg, want)
				}
			}
			if name == "topologyGeneration" || name == "activeSite" {
				return // the fence: the operator's moves are the fence guard's (TestFenceGuardThroughTheAPIServer)
			}
			if errs := ValidateStatusChange(oldG, newG, true); len(errs) > 0 {
				t.Fatalf("the operator's change of status.%s was denied: %v", name, errs)
			}
		})
	}
}

// fill gives v a non-zero value: every settable scalar, pointer, slice and
// exported struct field is set.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		if t, ok := v.Addr().Interface().(*metav1.Time); ok {
			*t = metav1.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

func TestValidateGroupSpec(t *testing.T) {
	tests := map[string]struct {
		mutate     func(*bloodravenv1alpha1.MysqlFailoverGroup)
		wantErrSub string
	}{
		"two sites": {mutate: func(*bloodravenv1alpha1.MysqlFailoverGroup) {}},
		"planned failover to a known site": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "r1", TargetSite: "pdx"}
		}},
		"planned failover to an unknown site": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "r1", TargetSite: "sfo"}
		},
			wantErrSub: "spec.plannedFailover.targetSite: Not found"},
		"restore in place to an unknown site": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.RestoreInPlace = &bloodravenv1alpha1.RestoreInPlaceRequest{ID: "r1", TargetSite: "sfo"}
		},
			wantErrSub: "spec.restoreInPlace.targetSite"},
		"duplicate site names": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.Sites = append(g.Spec.Sites, bloodravenv1alpha1.Site{Name: "iad"})
		},
			wantErrSub: "spec.sites[2].name: Duplicate value"},
		"removing the active site": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.Sites = g.Spec.Sites[1:] },
			wantErrSub: "cannot be removed"},
		"the revoke annotation with any value": {mutate: func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "because I said so!"}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := group("iad", 1)
			tc.mutate(g)
			errs := ValidateGroupSpec(g)
			if tc.wantErrSub == "" {
				if len(errs) > 0 {
					t.Fatalf("denied: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErrSub) {
				t.Fatalf("errors %v, want %q", errs, tc.wantErrSub)
			}
		})
	}
}

func TestValidateDatabase(t *testing.T) {
	db := func(ref string, clients ...bloodravenv1alpha1.DeploymentClient) *bloodravenv1alpha1.MysqlDatabase {
		return &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "counter-app"},
			Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: ref}, DatabaseName: "counter", DeploymentClients: clients}}
	}
	c := func(ns, sa string) bloodravenv1alpha1.DeploymentClient {
		return bloodravenv1alpha1.DeploymentClient{Namespace: ns, ServiceAccount: sa}
	}
	tests := map[string]struct {
		db      *bloodravenv1alpha1.MysqlDatabase
		wantErr []string
	}{
		"valid":                        {db: db("playground", c("app", "deploy"), c("batch", "deploy"))},
		"no clients":                   {db: db("playground")},
		"missing group":                {db: db(""), wantErr: []string{"spec.groupRef.name: Required value"}},
		"invalid group":                {db: db("Play_Ground"), wantErr: []string{"spec.groupRef.name: Invalid value"}},
		"two clients in one namespace": {db: db("playground", c("app", "a"), c("app", "b")), wantErr: []string{"spec.deploymentClients[1].namespace: Duplicate value", "spec.deploymentClients[0] already names"}},
		"missing serviceAccount":       {db: db("playground", c("app", "")), wantErr: []string{"spec.deploymentClients[0].serviceAccount: Required value"}},
		"missing namespace":            {db: db("playground", c("app", "x"), c("", "deploy")), wantErr: []string{"spec.deploymentClients[1].namespace: Required value"}},
		"invalid namespace":            {db: db("playground", c("App", "deploy")), wantErr: []string{"spec.deploymentClients[0].namespace: Invalid value"}},
		"invalid serviceAccount":       {db: db("playground", c("app", "deploy bot")), wantErr: []string{"spec.deploymentClients[0].serviceAccount: Invalid value"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateDatabase(tc.db)
			if len(tc.wantErr) == 0 {
				if len(errs) > 0 {
					t.Fatalf("denied: %v", errs)
				}
				return
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tc.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
		})
	}
}
