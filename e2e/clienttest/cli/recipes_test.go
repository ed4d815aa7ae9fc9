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

	// The Job recipes: two files, and the Helm hook as `helm template`
	// renders it (revision 1).
	readFile := func(file string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			raw, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}
	}
	for _, recipe := range []struct {
		file string
		load func(t *testing.T) []byte
	}{
		{"job.yaml", readFile("job.yaml")},
		{"argocd-presync.yaml", readFile("argocd-presync.yaml")},
		{"helm-hook", func(t *testing.T) []byte { return helmHook(t, filepath.Join(dir, "helm-hook")) }},
		{"flux/migrate-job.yaml", readFile(filepath.Join("flux", "migrate-job.yaml"))},
	} {
		file := recipe.file
		t.Run(file, func(t *testing.T) {
			raw := recipe.load(t)
			var job batchv1.Job
			if err := yaml.UnmarshalStrict(raw, &job); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			job.Namespace = s.op.ClientNamespace
			if err := env.Client.Create(context.Background(), job.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("%s: the API server refuses it: %v", file, err)
			}
			if file != "argocd-presync.yaml" {
				assertRetriesOnlyExit3(t, &job)
			}
			if file == "helm-hook" && (job.Name != "orders-migrate-1" || !strings.Contains(job.Annotations["helm.sh/hook"], "pre-upgrade")) {
				t.Fatalf("the hook renders as Job %q with hook %q: want orders-migrate-<revision>, a pre-upgrade hook", job.Name, job.Annotations["helm.sh/hook"])
			}
			c := job.Spec.Template.Spec.Containers[0]
			// The kubelet's expansion of $(VAR): values given inline, and
			// the Job's name for the downward API's job-name label (a
			// generated one, as the API server makes, for a hook Job
			// created anew on every sync).
			// The pod's job-name and controller-uid labels, as the Job
			// controller sets them.
			argsOf := func(jobName, jobUID string) []string {
				vars := map[string]string{}
				for _, e := range c.Env {
					switch {
					case e.Value != "":
						vars[e.Name] = e.Value
					case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.Contains(e.ValueFrom.FieldRef.FieldPath, "job-name"):
						vars[e.Name] = jobName
					case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.Contains(e.ValueFrom.FieldRef.FieldPath, "controller-uid"):
						vars[e.Name] = jobUID
					}
				}
				return append(append([]string(nil), c.Command...), expandAll(c.Args, vars)...)
			}
			const uid1, uid2 = "4f1e9a52-0c6d-4b0e-9a51-1d2f3c4b5a61", "7b2c8d13-5e4f-4a6b-8c7d-9e0f1a2b3c4d"
			name := job.Name
			switch {
			case name == "":
				name = job.GenerateName + "x7k2p"
				// Every sync attempt is a fresh operation: an id refused
				// after a revocation (exit 8) is never the next sync's.
				if a, b := argOperationID(t, argsOf(name, uid1)), argOperationID(t, argsOf(job.GenerateName+"q9w4r", uid2)); a == b || !strings.Contains(a, "3f9c2e1") {
					t.Fatalf("%s: two syncs run operation %q and %q: want a fresh id per attempt, naming the revision", file, a, b)
				}
			case strings.HasPrefix(file, "flux/"):
				// The Job recreated under the same name (Flux's force, or a
				// person's retry) is a fresh operation.
				if a, b := argOperationID(t, argsOf(name, uid1)), argOperationID(t, argsOf(name, uid2)); a == b {
					t.Fatalf("%s: the Job recreated under its name runs operation %q again: want a fresh id per Job", file, a)
				}
			}
			argv := argsOf(name, uid1)
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
		attempt := func(n string) []string {
			return []string{"GITHUB_SHA=3f9c2e1", "GITHUB_RUN_ID=118", "GITHUB_RUN_ATTEMPT=" + n, "RUNNER_TEMP=" + t.TempDir()}
		}
		freshPerAttempt(t, script, attempt("1"), attempt("2"))
		code, out := s.runRecipe(bin, []string{"sh", "-c", script}, attempt("1")...)
		if code != deploycmd.ExitOK {
			t.Fatalf("the step exited %d:\n%s", code, out)
		}
	})
	t.Run("gitlab-ci.yml", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "gitlab-ci.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var ci map[string]struct {
			Variables map[string]string `json:"variables"`
			Script    []string          `json:"script"`
		}
		if err := yaml.Unmarshal(raw, &ci); err != nil {
			t.Fatal(err)
		}
		job, ok := ci["migrate"]
		if !ok || len(job.Script) == 0 {
			t.Fatal("no migrate job with a script")
		}
		script := strings.Join(job.Script, "\n")
		attempt := func(jobID string) []string {
			env := []string{"CI_COMMIT_SHORT_SHA=3f9c2e1", "CI_JOB_ID=" + jobID, "CI_PROJECT_DIR=" + t.TempDir()}
			for k, v := range job.Variables {
				env = append(env, k+"="+v)
			}
			return env
		}
		freshPerAttempt(t, script, attempt("4711"), attempt("4712"))
		if code, out := s.runRecipe(bin, []string{"sh", "-c", script}, attempt("4711")...); code != deploycmd.ExitOK {
			t.Fatalf("the job exited %d:\n%s", code, out)
		}
	})
	t.Run("flux/kustomizations.yaml", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "flux", "kustomizations.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		type kustomization struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Wait      bool `json:"wait"`
				Force     bool `json:"force"`
				DependsOn []struct {
					Name string `json:"name"`
				} `json:"dependsOn"`
			} `json:"spec"`
		}
		byName := map[string]kustomization{}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			var k kustomization
			if err := yaml.Unmarshal([]byte(doc), &k); err != nil {
				t.Fatal(err)
			}
			byName[k.Metadata.Name] = k
		}
		m, app := byName["orders-migrate"], byName["orders-app"]
		if m.Kind != "Kustomization" || !m.Spec.Wait || !m.Spec.Force {
			t.Errorf("orders-migrate %+v: want a Kustomization that waits for its Job and recreates it", m)
		}
		if len(app.Spec.DependsOn) != 1 || app.Spec.DependsOn[0].Name != "orders-migrate" {
			t.Errorf("orders-app depends on %+v: want orders-migrate, so the application follows a finished migration", app.Spec.DependsOn)
		}
	})
	t.Run("tekton-task.yaml", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "tekton-task.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var task struct {
			Kind string `json:"kind"`
			Spec struct {
				Params []struct {
					Name string `json:"name"`
				} `json:"params"`
				Steps []struct {
					Env []struct {
						Name  string `json:"name"`
						Value string `json:"value"`
					} `json:"env"`
					Script string `json:"script"`
				} `json:"steps"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &task); err != nil {
			t.Fatal(err)
		}
		if task.Kind != "Task" || len(task.Spec.Steps) != 1 {
			t.Fatalf("%+v: want a Task with one step", task)
		}
		// Tekton's substitution of $(params.x) and $(context.taskRun.name),
		// the latter left to the shell so that two runs can differ.
		params := map[string]string{"group": operatortest.GroupName, "instance": operatortest.Instance, "revision": "3f9c2e1",
			"image": "registry.example.com/orders/migrate:3f9c2e1"}
		declared := map[string]bool{}
		for _, p := range task.Spec.Params {
			declared[p.Name] = true
		}
		script := regexp.MustCompile(`\$\(params\.([a-z-]+)\)`).ReplaceAllStringFunc(task.Spec.Steps[0].Script, func(m string) string {
			name := m[len("$(params.") : len(m)-1]
			if !declared[name] {
				t.Fatalf("the script uses param %s, which the Task does not declare", name)
			}
			return params[name]
		})
		script = strings.ReplaceAll(script, "$(context.taskRun.name)", "${TASKRUN_NAME}")
		var env []string
		for _, e := range task.Spec.Steps[0].Env {
			env = append(env, e.Name+"="+e.Value)
		}
		run := func(name string) []string { return append(append([]string(nil), env...), "TASKRUN_NAME="+name) }
		freshPerAttempt(t, script, run("migrate-run-x7k2p"), run("migrate-run-q9w4r"))
		if code, out := s.runRecipe(bin, []string{"sh", "-c", script}, run("migrate-run-x7k2p")...); code != deploycmd.ExitOK {
			t.Fatalf("the step exited %d:\n%s", code, out)
		}
	})
	t.Run("action/action.yml", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "action", "action.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var action struct {
			Inputs map[string]struct {
				Default string `json:"default"`
			} `json:"inputs"`
			Runs struct {
				Using string `json:"using"`
				Steps []struct {
					Shell string            `json:"shell"`
					Env   map[string]string `json:"env"`
					Run   string            `json:"run"`
				} `json:"steps"`
			} `json:"runs"`
		}
		if err := yaml.Unmarshal(raw, &action); err != nil {
			t.Fatal(err)
		}
		if action.Runs.Using != "composite" || len(action.Runs.Steps) != 1 {
			t.Fatalf("runs %+v: want one composite step", action.Runs)
		}
		step := action.Runs.Steps[0]
		// GitHub's expansion of ${{ inputs.x }}: the caller's with, else
		// the input's default.
		with := map[string]string{"group": operatortest.GroupName, "instance": operatortest.Instance, "command": "migrate up"}
		input := regexp.MustCompile(`\$\{\{ *inputs\.([a-z-]+) *\}\}`)
		output := filepath.Join(t.TempDir(), "output")
		attempt := func(n string) []string {
			env := []string{"GITHUB_SHA=3f9c2e1", "GITHUB_RUN_ID=118", "GITHUB_RUN_ATTEMPT=" + n, "RUNNER_TEMP=" + t.TempDir(), "GITHUB_OUTPUT=" + output}
			for k, v := range step.Env {
				env = append(env, k+"="+input.ReplaceAllStringFunc(v, func(m string) string {
					name := input.FindStringSubmatch(m)[1]
					in, ok := action.Inputs[name]
					if !ok {
						t.Fatalf("env %s uses input %s, which the action does not declare", k, name)
					}
					if w, ok := with[name]; ok {
						return w
					}
					return in.Default
				}))
			}
			return env
		}
		freshPerAttempt(t, step.Run, attempt("1"), attempt("2"))
		if code, out := s.runRecipe(bin, []string{step.Shell, "-c", step.Run}, attempt("1")...); code != deploycmd.ExitOK {
			t.Fatalf("the action exited %d:\n%s", code, out)
		}
		if b, _ := os.ReadFile(output); !strings.Contains(string(b), "outcome-file=") {
			t.Fatalf("the action set no outcome-file output: %q", b)
		}
	})
}

// helmHook renders the Helm hook chart with bin/helm and returns its Job.
func helmHook(t *testing.T, chart string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "bin", "helm"), "template", "orders", chart, "--namespace", "orders")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s (run `make tools` if bin/helm is missing): %v", chart, err)
	}
	return out
}

// freshPerAttempt runs script twice with a stub bloodraven-deploy that only
// records its arguments, once per attempt's environment, and fails unless
// the two attempts run two operations: an operation id refused after a
// revocation (exit 8) must never be the next attempt's.
func freshPerAttempt(t *testing.T, script string, first, second []string) {
	t.Helper()
	ids := make([]string, 2)
	for i, env := range [][]string{first, second} {
		dir := t.TempDir()
		stub := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + filepath.Join(dir, "args") + "\"\n"
		if err := os.WriteFile(filepath.Join(dir, "bloodraven-deploy"), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH")), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the script with a stub CLI: %v\n%s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "args"))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(strings.TrimSpace(string(b)), "\n")
		for j, a := range args {
			if a == "--operation-id" && j+1 < len(args) {
				ids[i] = args[j+1]
			}
		}
		if ids[i] == "" {
			t.Fatalf("the script passes no --operation-id: %q", args)
		}
	}
	if ids[0] == ids[1] {
		t.Fatalf("two attempts run the same operation %q: want a fresh id per attempt", ids[0])
	}
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
