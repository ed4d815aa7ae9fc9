package webhook

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// NotTheOperatorCondition names the match condition that keeps the
// operator's own requests away from every webhook.
const NotTheOperatorCondition = "not-the-operator"

// NotTheOperator is the match condition under which a webhook is called:
// the request is not the operator's (operatorUsername,
// system:serviceaccount:<ns>:<name>). The API server evaluates it itself,
// before it would call the webhook, so the operator's status, DeployRun and
// bookkeeping writes never wait on a replica that is lost or slow; everyone
// else's requests are sent, and refused when no replica answers
// (failurePolicy Fail). The operator's fence moves are held to the fence's
// rules by the fence guard (FenceGuard) instead, which needs no call.
func NotTheOperator(operatorUsername string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{
		Name:       NotTheOperatorCondition,
		Expression: "request.userInfo.username != " + literal(operatorUsername),
	}
}

// ExemptTheOperator adds NotTheOperator to every webhook of cfg. The
// configuration generated from the markers here (config/webhook) cannot
// carry it (the markers know no match conditions, nor the release's
// ServiceAccount); the playground and the tests add it with this function,
// and the chart's templates/webhook.yaml renders the same condition (a chart
// test holds the two equal).
func ExemptTheOperator(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, operatorUsername string) {
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].MatchConditions = append(cfg.Webhooks[i].MatchConditions, NotTheOperator(operatorUsername))
	}
}

// literal is s as a CEL string literal.
func literal(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
