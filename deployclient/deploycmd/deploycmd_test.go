package deploycmd

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/deployclient"
)

func TestExplainNamesWhatToDo(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"held, waited out":        {&deployclient.AcquireError{WaitedOut: true, Err: &deployclient.APIError{Status: 409, Code: "held", Holder: &deployclient.Holder{OperationID: "a", Instance: "b", ExpiresAt: "t"}}}, "still held by operation a (instance b, until t) after waiting 1m0s"},
		"held, no holder":         {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 409, Code: "held"}}, "held by another operation"},
		"revoked":                 {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 409, Code: "revoked", Reason: "operator_revoked", Generation: 3}}, "can never be granted again"},
		"unauthenticated":         {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 401, Code: "unauthenticated"}}, "audience bloodraven-deploy"},
		"forbidden":               {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 403, Code: "forbidden"}}, "spec.deploymentClients of MysqlDatabase db"},
		"a spent deferral budget": {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 409, Code: "deferral_budget_exhausted"}}, "retry after it has run"},
		"verification required":   {&deployclient.AcquireError{Err: &deployclient.APIError{Status: 409, Code: "verification_required", OperationID: "op-1", Generation: 2}}, "schema-verified=op-1"},
		"a transport error":       {&deployclient.AcquireError{Err: errors.New("dial tcp: connection refused")}, "is the deployment API reachable"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := explain(tc.err, "g", "", "db", "op", "/t", time.Minute); !strings.Contains(got, tc.want) {
				t.Fatalf("explain = %q, want %q in it", got, tc.want)
			}
		})
	}
}

func TestATokenGivenAsItsFileIsNotEchoed(t *testing.T) {
	tok := "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"
	_, err := deployclient.ReadToken(tok)
	if err == nil || strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), tok[:20]) {
		t.Fatalf("ReadToken(token) = %v", err)
	}
	if _, err := deployclient.ReadToken("/nonexistent/token"); err == nil || !strings.Contains(err.Error(), "/nonexistent/token") {
		t.Fatalf("a missing path is named: %v", err)
	}
}

// run's help lists every exit code a pipeline can branch on, and the tree
// offers shell completion.
func TestRunHelpNamesEveryExitCode(t *testing.T) {
	var out, errb strings.Builder
	if code := Run("bloodraven-deploy", []string{"run", "--help"}, strings.NewReader(""), &out, &errb, func(string) string { return "" }); code != ExitOK {
		t.Fatalf("run --help: exit %d: %s", code, errb.String())
	}
	for code := ExitOK; code <= ExitRefused; code++ {
		if !strings.Contains(out.String(), "\n  "+strconv.Itoa(code)+"  ") {
			t.Errorf("run --help does not explain exit %d:\n%s", code, out.String())
		}
	}
	out.Reset()
	if code := Run("bloodraven-deploy", []string{"completion", "bash"}, strings.NewReader(""), &out, &errb, func(string) string { return "" }); code != ExitOK || !strings.Contains(out.String(), "bash completion") {
		t.Fatalf("completion bash: exit %d, %d bytes", code, out.Len())
	}
	if code := Run("bloodraven-deploy", []string{"run", "--no-such-flag"}, strings.NewReader(""), &out, &errb, func(string) string { return "" }); code != ExitUsage {
		t.Fatalf("an unknown flag: exit %d, want %d", code, ExitUsage)
	}
}

// The online-schema-change hooks work only inside a run: outside one they
// fail with a usage error that says so, and nothing is cut over.
func TestTheCutOverHooksOutsideARunFailClearly(t *testing.T) {
	noEnv := func(string) string { return "" }
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"cut-over outside a run":              {[]string{"cut-over"}, "run this inside 'bloodraven deploy run -- ...' (the tool's cut-over hook); do not cut over"},
		"postponing outside a run":            {[]string{"postponing"}, "run this inside 'bloodraven deploy run --postpone-flag-file"},
		"cut-over with a zero budget":         {[]string{"cut-over", "--budget", "0s"}, "must be positive"},
		"a postpone file in a missing folder": {[]string{"run", "--group", "g", "--instance", "i", "--postpone-flag-file", "/nonexistent/dir/postpone", "--", "true"}, "its directory does not exist"},
		"a cut-over budget past half the ttl": {[]string{"run", "--group", "g", "--instance", "i", "--ttl", "30", "--postpone-flag-file", filepath.Join(t.TempDir(), "postpone"), "--cut-over-budget", "16s", "--", "true"}, "at most half the ttl"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb strings.Builder
			getenv := noEnv
			if name == "cut-over with a zero budget" {
				getenv = func(k string) string {
					if k == EnvControl {
						return "/nonexistent/control"
					}
					return ""
				}
			}
			if code := Run("bloodraven-deploy", tc.args, strings.NewReader(""), &out, &errb, getenv); code != ExitUsage || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, want %d naming %q:\n%s", code, ExitUsage, tc.want, errb.String())
			}
		})
	}
}
