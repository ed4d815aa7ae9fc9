package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/deployclient/deploycmd"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// The recipes of examples/pipelines run: no kubelet runs here, so each
// manifest is created with a server-side dry run against the real
// kube-apiserver, and the exact command line its container (or step) runs
// is executed against the real operator, with `bloodraven-deploy` on PATH
// and `migrate up` stubbed by a script that marks the DDL boundary.
func TestThePipelineRecipesRun(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	bin := s.pathWithCLI()
	dir := filepath.Join(testenv.RepoRoot(), "examples", "pipelines")

	for _, file := range []string{"job.yaml", "argocd-presync.yaml"} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			var job batchv1.Job
			if err := yaml.UnmarshalStrict(raw, &job); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			job.Namespace = s.op.ClientNamespace
			if err := env.Client.Create(context.Background(), job.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("%s: the API server refuses it: %v", file, err)
			}
			if file == "job.yaml" {
				assertRetriesOnlyExit3(t, &job)
			}
			c := job.Spec.Template.Spec.Containers[0]
			// The kubelet's expansion of $(VAR): values given inline, and
			// the Job's name for the downward API's job-name label (a
			// generated one, as the API server makes, for a hook Job
			// created anew on every sync).
			argsOf := func(jobName string) []string {
				vars := map[string]string{}
				for _, e := range c.Env {
					switch {
					case e.Value != "":
						vars[e.Name] = e.Value
					case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.Contains(e.ValueFrom.FieldRef.FieldPath, "job-name"):
						vars[e.Name] = jobName
					}
				}
				return append(append([]string(nil), c.Command...), expandAll(c.Args, vars)...)
			}
			name := job.Name
			if name == "" {
				name = job.GenerateName + "x7k2p"
				// Every sync attempt is a fresh operation: an id refused
				// after a revocation (exit 8) is never the next sync's.
				if a, b := argOperationID(t, argsOf(name)), argOperationID(t, argsOf(job.GenerateName+"q9w4r")); a == b || !strings.Contains(a, "3f9c2e1") {
					t.Fatalf("%s: two syncs run operation %q and %q: want a fresh id per attempt, naming the revision", file, a, b)
				}
			}
			argv := argsOf(name)
			code, out := s.runRecipe(bin, argv)
			if code != deploycmd.ExitOK {
				t.Fatalf("%s: %q exited %d:\n%s", file, strings.Join(argv, " "), code, out)
			}
		})
	}
	t.Run("github-actions.yml", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "github-actions.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var wf struct {
			Jobs map[string]struct {
				Steps []struct {
					Name string            `json:"name"`
					Run  string            `json:"run"`
					Env  map[string]string `json:"env"`
				} `json:"steps"`
			} `json:"jobs"`
		}
		if err := yaml.Unmarshal(raw, &wf); err != nil {
			t.Fatal(err)
		}
		var script string
		for _, st := range wf.Jobs["migrate"].Steps {
			if strings.Contains(st.Run, "bloodraven-deploy run") {
				script = st.Run
			}
		}
		if script == "" {
			t.Fatal("no step runs bloodraven-deploy")
		}
		code, out := s.runRecipe(bin, []string{"sh", "-c", script}, "GITHUB_SHA=3f9c2e1", "GITHUB_RUN_ID=118", "RUNNER_TEMP="+t.TempDir())
		if code != deploycmd.ExitOK {
			t.Fatalf("the step exited %d:\n%s", code, out)
		}
	})
}

// assertRetriesOnlyExit3: the Job's podFailurePolicy fails the Job on every
// non-zero exit of the migration container but 3.
func assertRetriesOnlyExit3(t *testing.T, job *batchv1.Job) {
	t.Helper()
	p := job.Spec.PodFailurePolicy
	if p == nil || len(p.Rules) != 1 || p.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob {
		t.Fatalf("podFailurePolicy %+v: want one FailJob rule", p)
	}
	r := p.Rules[0].OnExitCodes
	if r == nil || r.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn || len(r.Values) != 1 || r.Values[0] != deploycmd.ExitNotAcquired {
		t.Fatalf("onExitCodes %+v: want NotIn [3]", r)
	}
}

// argOperationID is the --operation-id of argv.
func argOperationID(t *testing.T, argv []string) string {
	t.Helper()
	for _, a := range argv {
		if id, ok := strings.CutPrefix(a, "--operation-id="); ok {
			if strings.Contains(id, "$(") {
				t.Fatalf("operation id %q is not expanded", id)
			}
			return id
		}
	}
	t.Fatalf("no --operation-id in %q", argv)
	return ""
}

var k8sVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandAll expands $(VAR) as the kubelet does in a container's args.
func expandAll(args []string, vars map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = k8sVar.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := vars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// pathWithCLI is a directory for PATH with `bloodraven-deploy` (this test
// binary as the CLI) and `migrate` (a stub: mark the DDL boundary, then
// succeed).
func (s *scene) pathWithCLI() string {
	s.t.Helper()
	dir := s.t.TempDir()
	cli := "#!/bin/sh\nexec \"" + os.Args[0] + "\" deploy \"$@\"\n"
	migrate := "#!/bin/sh\nbloodraven-deploy mark-ddl || exit 1\necho \"migrated $*\" > \"$OUT/migrated\"\n"
	for name, body := range map[string]string{"bloodraven-deploy": cli, "migrate": migrate} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			s.t.Fatal(err)
		}
	}
	return dir
}

// runRecipe runs argv with the scene's connection (server, CA, token) in
// the environment, as the recipe's volumes and defaults would give it.
func (s *scene) runRecipe(bin string, argv []string, extra ...string) (int, string) {
	s.t.Helper()
	name := argv[0]
	if name == "bloodraven-deploy" { // as the container's PATH would find it
		name = filepath.Join(bin, name)
	}
	cmd := exec.Command(name, argv[1:]...)
	cmd.Env = append(os.Environ(), reexecEnv+"=1", "PATH="+bin+":"+os.Getenv("PATH"), "OUT="+s.dir)
	cmd.Env = append(cmd.Env, extra...)
	// After the recipe's own values: the scene's operator stands in for
	// the release's Service, CA and projected token.
	cmd.Env = append(cmd.Env, deploycmd.EnvServer+"="+s.op.URL, deploycmd.EnvCA+"="+s.op.CAFile, deploycmd.EnvTokenFile+"="+s.tokenFile)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	if !strings.Contains(s.read("migrated"), "migrated up") {
		return -1, string(out) + "\n(the migration stub did not run)"
	}
	_ = os.Remove(filepath.Join(s.dir, "migrated"))
	return code, string(out)
}
