package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
)

// StatusView is one group's answer to `status -o json|yaml`: what the
// human form shows, with the group's own status fields. Several groups
// (no GROUP, or -A) are a ListView of them.
type StatusView struct {
	Namespace          string `json:"namespace"`
	Name               string `json:"name"`
	Primary            string `json:"primary"`
	TopologyGeneration int64  `json:"topologyGeneration"`
	// PrimaryLostAt and FailureDetectionSeconds: the emergency path's
	// clock, while the primary is lost.
	PrimaryLostAt           *metav1.Time                              `json:"primaryLostAt,omitempty"`
	FailureDetectionSeconds int32                                     `json:"failureDetectionSeconds"`
	Transition              *bloodravenv1alpha1.TopologyTransition    `json:"transition,omitempty"`
	Conditions              []metav1.Condition                        `json:"conditions"`
	PlannedFailover         *bloodravenv1alpha1.PlannedFailoverStatus `json:"plannedFailover,omitempty"`
	Mutex                   *LeaseView                                `json:"mutex"`
	Holds                   []LeaseView                               `json:"holds"`
	// CutOver is the group's side of an online schema change's cut-over,
	// judged as the deployment API's observation judges it.
	CutOver CutOverView `json:"cutOver"`
}

// CutOverView says whether the group allows a cut-over now and, when not,
// why (docs/online-schema-change.md).
type CutOverView struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// LeaseView is one deployment Lease record as the plugin shows it: never
// its token's hash, nor the hashes a tombstone keeps.
type LeaseView struct {
	Namespace   string `json:"namespace"`
	Group       string `json:"group"`
	Kind        string `json:"kind"`
	OperationID string `json:"operationId"`
	Instance    string `json:"instance,omitempty"`
	// State is the stored state, "expired" for an active record past its
	// expiry.
	State              string     `json:"state"`
	Reason             string     `json:"reason,omitempty"`
	TopologyGeneration int64      `json:"topologyGeneration"`
	Phase              string     `json:"phase,omitempty"`
	GrantedAt          *time.Time `json:"grantedAt,omitempty"`
	ExpiresAt          *time.Time `json:"expiresAt,omitempty"`
	Identity           string     `json:"identity,omitempty"`
}

// ListView is several answers: `{"items": [...]}`.
type ListView[T any] struct {
	Items []T `json:"items"`
}

// groupRecords is one group and its records, newest grant first.
type groupRecords struct {
	g    *bloodravenv1alpha1.MysqlFailoverGroup
	recs []*leases.Record
}

func leaseView(g *bloodravenv1alpha1.MysqlFailoverGroup, r *leases.Record, now time.Time) LeaseView {
	v := LeaseView{Namespace: g.Namespace, Group: g.Name, Kind: string(r.Kind), OperationID: r.OperationID, Instance: r.Instance,
		State: string(r.State), Reason: r.Reason, TopologyGeneration: r.Generation, Identity: r.Identity}
	if r.State == leases.StateActive && !r.Live(now) {
		v.State = string(leases.StateExpired)
	}
	if r.Kind == leases.KindMigration {
		v.Phase = string(r.Phase.Effective())
	}
	if !r.GrantedAt.IsZero() {
		t := r.GrantedAt.UTC()
		v.GrantedAt = &t
	}
	if !r.ExpiresAt.IsZero() && r.Kind != leases.KindTombstone {
		t := r.ExpiresAt.UTC()
		v.ExpiresAt = &t
	}
	return v
}

func statusView(gr groupRecords, now time.Time) StatusView {
	g, s := gr.g, gr.g.Status
	v := StatusView{Namespace: g.Namespace, Name: g.Name, Primary: s.ActiveSite, TopologyGeneration: s.TopologyGeneration,
		PrimaryLostAt: s.PrimaryLostAt, FailureDetectionSeconds: g.Spec.FailureDetectionSeconds, Transition: s.Transition,
		Conditions: s.Conditions, Holds: []LeaseView{}}
	if v.Conditions == nil {
		v.Conditions = []metav1.Condition{}
	}
	if pf := s.PlannedFailover; pf != nil && pf.Phase != "" {
		v.PlannedFailover = pf
	}
	co := policy.CutOver(&s, now, policy.DefaultCutOverMargin)
	v.CutOver = CutOverView{Allowed: co.Allowed, Reason: co.Reason, Message: co.Message}
	for _, r := range gr.recs {
		if !r.Live(now) || r.State != leases.StateActive {
			continue
		}
		lv := leaseView(g, r, now)
		switch r.Kind {
		case leases.KindMigration:
			v.Mutex = &lv
		case leases.KindFailoverHold:
			v.Holds = append(v.Holds, lv)
		}
	}
	return v
}

// printer writes answers in the -o format: "" (the human form), json or
// yaml.
type printer struct {
	format string
	out    io.Writer
}

func (p printer) structured(v any) error {
	switch p.format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = p.out.Write(b)
		return err
	}
	return fmt.Errorf("%w: -o %q: want json or yaml", ErrUsage, p.format)
}

// writeStatuses prints groups' observations; one named group is one object
// in json and yaml, anything else a list.
func (p printer) writeStatuses(groups []groupRecords, named bool, now time.Time) error {
	if p.format != "" {
		views := make([]StatusView, 0, len(groups))
		for _, gr := range groups {
			views = append(views, statusView(gr, now))
		}
		if named && len(views) == 1 {
			return p.structured(views[0])
		}
		return p.structured(ListView[StatusView]{Items: views})
	}
	if len(groups) == 0 {
		_, err := fmt.Fprintln(p.out, "No MysqlFailoverGroups found.")
		return err
	}
	for i, gr := range groups {
		if i > 0 {
			fmt.Fprintln(p.out)
		}
		writeStatus(p.out, gr.g, gr.recs, now)
	}
	return nil
}

// writeLeaseList prints the records of groups: json and yaml are always a
// list; the table names the group when there are several, and the
// namespace with -A.
func (p printer) writeLeaseList(groups []groupRecords, named, allNamespaces bool, now time.Time) error {
	if p.format != "" {
		items := []LeaseView{}
		for _, gr := range groups {
			for _, r := range gr.recs {
				items = append(items, leaseView(gr.g, r, now))
			}
		}
		return p.structured(ListView[LeaseView]{Items: items})
	}
	var cols []func(LeaseView) string
	var head []string
	if allNamespaces {
		head, cols = append(head, "NAMESPACE"), append(cols, func(v LeaseView) string { return v.Namespace })
	}
	if !named {
		head, cols = append(head, "GROUP"), append(cols, func(v LeaseView) string { return v.Group })
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(append(head, "KIND", "OPERATION", "INSTANCE", "STATE", "REASON", "GENERATION", "PHASE", "EXPIRES", "IDENTITY"), "\t"))
	for _, gr := range groups {
		for _, r := range gr.recs {
			v := leaseView(gr.g, r, now)
			var row []string
			for _, c := range cols {
				row = append(row, c(v))
			}
			expires := "-"
			if v.ExpiresAt != nil {
				if d := v.ExpiresAt.Sub(now); d > 0 {
					expires = "in " + d.Round(time.Second).String()
				} else {
					expires = (-d).Round(time.Second).String() + " ago"
				}
			}
			row = append(row, v.Kind, v.OperationID, orDash(v.Instance), v.State, orDash(v.Reason),
				fmt.Sprint(v.TopologyGeneration), orDash(v.Phase), expires, orDash(v.Identity))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}

func writeStatus(out io.Writer, g *bloodravenv1alpha1.MysqlFailoverGroup, recs []*leases.Record, now time.Time) {
	v := statusView(groupRecords{g, recs}, now)
	fmt.Fprintf(out, "Group:       %s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(out, "Primary:     %s\n", orNone(v.Primary))
	fmt.Fprintf(out, "Generation:  %d\n", v.TopologyGeneration)
	if v.PrimaryLostAt != nil {
		fmt.Fprintf(out, "Lost since:  %s (budget %ds)\n", v.PrimaryLostAt.UTC().Format(time.RFC3339), v.FailureDetectionSeconds)
	}
	if t := v.Transition; t != nil {
		fmt.Fprintf(out, "Transition:  %s to %s since %s\n", t.Operation, t.TargetSite, t.StartedAt.UTC().Format(time.RFC3339))
	}
	var conds []string
	for _, c := range v.Conditions {
		if c.Status == metav1.ConditionTrue {
			conds = append(conds, c.Type)
		}
	}
	sort.Strings(conds)
	fmt.Fprintf(out, "Conditions:  %s\n", orNone(strings.Join(conds, ", ")))
	if pf := v.PlannedFailover; pf != nil {
		fmt.Fprintf(out, "Planned:     failover %s to %s: %s", pf.ID, pf.TargetSite, pf.Phase)
		if a := pf.Admission; a != nil {
			if a.DeferReason != "" {
				fmt.Fprintf(out, " (%s", a.DeferReason)
				if a.RetryTime != nil {
					fmt.Fprintf(out, ", retry at %s", a.RetryTime.UTC().Format(time.RFC3339))
				}
				fmt.Fprint(out, ")")
			}
			if a.Message != "" {
				fmt.Fprintf(out, ": %s", a.Message)
			}
		}
		fmt.Fprintln(out)
	}
	desc := func(l LeaseView) string {
		return fmt.Sprintf("%s (instance %s, generation %d, expires in %s)", l.OperationID, l.Instance, l.TopologyGeneration,
			l.ExpiresAt.Sub(now).Round(time.Second))
	}
	mutex := "none"
	if m := v.Mutex; m != nil {
		mutex = desc(*m) + ", phase " + m.Phase
	}
	var holds []string
	for _, h := range v.Holds {
		holds = append(holds, desc(h))
	}
	fmt.Fprintf(out, "Mutex:       %s\n", mutex)
	fmt.Fprintf(out, "Holds:       %s\n", orNone(strings.Join(holds, "; ")))
	if v.CutOver.Allowed {
		fmt.Fprintln(out, "Cut-over:    allowed")
	} else {
		fmt.Fprintf(out, "Cut-over:    not allowed: %s: %s\n", v.CutOver.Reason, v.CutOver.Message)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
