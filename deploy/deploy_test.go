// Tests of deploy/: the Dockerfile, the Kubernetes manifests, the Envoy
// configuration and the Grafana dashboard agree with each other and with
// sluice itself. They read the files as they are, run the real sluice binary
// (built by TestMain) with the Deployment's own arguments and the ConfigMaps'
// files laid out as the kubelet mounts them, on a real Redis, and talk to it
// as Envoy and Prometheus would.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// root is the repository root, relative to this package's directory.
const root = ".."

// binary is sluice, built once by TestMain.
var binary string

func TestMain(m *testing.M) { proctest.Main(m, root, "./cmd/sluice", &binary) }

// ---------------------------------------------------------------- sluice's own facts

// listeners are sluice's listeners and their default ports (server.Default*).
func listeners(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, addr := range map[string]string{"gateway": server.DefaultGateway, "grpc": server.DefaultGRPC, "admin": server.DefaultAdmin, "api": server.DefaultAPI} {
		out[name] = portOf(t, addr)
	}
	return out
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: port %q", addr, p)
	}
	return n
}

// knownEnv reports whether sluice reads the variable name.
func knownEnv(name string) bool {
	if name == "SLUICE_CONFIG" {
		return true
	}
	for _, s := range server.Settings {
		if s.Env == name {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- Dockerfile

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var instrs []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		instrs = append(instrs, cur.String())
		cur.Reset()
	}

	want := listeners(t)
	var exposed []int
	env := map[string]string{}
	var froms, users, copies, runs []string
	args := map[string]string{}
	for _, in := range instrs {
		op, rest, _ := strings.Cut(in, " ")
		switch strings.ToUpper(op) {
		case "FROM":
			froms = append(froms, rest)
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case "EXPOSE":
			for _, f := range strings.Fields(rest) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Errorf("EXPOSE %q: want a port number", f)
				}
				exposed = append(exposed, n)
			}
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Errorf("ENV %q: want NAME=value", kv)
				}
				env[k] = v
			}
		case "USER":
			users = append(users, rest)
		case "COPY":
			copies = append(copies, rest)
		case "RUN":
			runs = append(runs, rest)
		}
	}

	// Every listener but admin on all interfaces, on sluice's port,
	// exposed; admin (metrics, the status page) on the container's
	// loopback, not exposed, until an operator opens it with a token.
	for name, port := range want {
		v := env["SLUICE_"+strings.ToUpper(name)]
		if name == "admin" {
			if v != fmt.Sprintf("127.0.0.1:%d", port) || slices.Contains(exposed, port) {
				t.Errorf("ENV SLUICE_ADMIN=%q, EXPOSE %v: want 127.0.0.1:%d, not exposed", v, exposed, port)
			}
			continue
		}
		if v != fmt.Sprintf(":%d", port) {
			t.Errorf("ENV SLUICE_%s=%q, want :%d (all interfaces, sluice's port)", strings.ToUpper(name), v, port)
		}
		if !slices.Contains(exposed, port) {
			t.Errorf("EXPOSE lacks %s's port %d", name, port)
		}
	}
	if len(exposed) != len(want)-1 {
		t.Errorf("EXPOSE %v: want exactly sluice's listener ports but admin's", exposed)
	}
	for k := range env {
		if strings.HasPrefix(k, "SLUICE_") && !knownEnv(k) {
			t.Errorf("ENV %s: sluice reads no such variable (server.Settings)", k)
		}
	}

	// A builder on the go.mod's Go version, a distroless or scratch image last.
	if len(froms) != 2 {
		t.Fatalf("FROM: %q, want a builder and a final stage", froms)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil || args["GO_VERSION"] != string(goVersion[1]) {
		t.Errorf("ARG GO_VERSION=%q, want go.mod's %q", args["GO_VERSION"], goVersion)
	}
	if !strings.HasPrefix(froms[0], "golang:${GO_VERSION} AS ") {
		t.Errorf("builder FROM %q, want golang:${GO_VERSION} AS ...", froms[0])
	}
	if final := froms[1]; !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final FROM %q: want distroless/static or scratch (a static binary needs nothing else)", final)
	}
	build := strings.Join(runs, "\n")
	for _, s := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=${VERSION}", "./cmd/sluice"} {
		if !strings.Contains(build, s) {
			t.Errorf("no RUN builds with %q", s)
		}
	}

	// A numeric, non-root user, so runAsNonRoot can check it.
	if len(users) != 1 {
		t.Fatalf("USER: %q, want one", users)
	}
	uid, _, _ := strings.Cut(users[0], ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric UID other than 0", users[0])
	}

	// What COPY takes from the context exists and the ignore file lets it
	// in. BuildKit reads the ignore file named after the Dockerfile, next to
	// it; with the repository root as the context, a deploy/.dockerignore
	// would be read by nothing.
	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(".dockerignore"); err == nil {
		t.Error("deploy/.dockerignore: docker build -f deploy/Dockerfile . never reads it; use deploy/Dockerfile.dockerignore")
	}
	for _, c := range copies {
		f := strings.Fields(c)
		if strings.HasPrefix(f[0], "--from=") || f[0] == "." {
			continue
		}
		for _, src := range f[:len(f)-1] {
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
			if src == "go.mod" || src == "go.sum" {
				continue
			}
			if !dockerIncluded(string(ignore), src) {
				t.Errorf("COPY %s: Dockerfile.dockerignore excludes it", src)
			}
		}
	}
	// The image's policy and RLS configs are valid, as sluice reads them.
	for _, p := range []string{env["SLUICE_POLICY"], env["SLUICE_RLS"]} {
		var src string
		for _, c := range copies {
			if f := strings.Fields(c); len(f) == 2 && strings.TrimSuffix(f[1], "/") == strings.TrimSuffix(p, "/") {
				src = f[0]
			}
		}
		if src == "" {
			t.Errorf("ENV points at %s, which no COPY provides", p)
			continue
		}
		checkOK(t, filepath.Join(root, src))
	}
}

// dockerIncluded is a small .dockerignore evaluation: the last pattern that
// matches path or one of its parents decides, ! re-includes.
func dockerIncluded(ignore, path string) bool {
	path = strings.TrimSuffix(path, "/")
	included := true
	for _, line := range strings.Split(ignore, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		pat := strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/")
		for p := path; p != "." && p != "/"; p = filepath.Dir(p) {
			if ok, _ := filepath.Match(pat, p); ok || strings.HasPrefix(pat, "**/") && matchBase(pat[3:], p) {
				included = neg
				break
			}
		}
	}
	return included
}

func matchBase(pat, p string) bool {
	ok, _ := filepath.Match(pat, filepath.Base(p))
	return ok
}

func TestDockerIgnoreEvaluation(t *testing.T) {
	ignore := "deploy\n!deploy/kubernetes/base/policy.yaml\n**/*_test.go\n"
	for path, want := range map[string]bool{
		"deploy/kubernetes/base/policy.yaml":    true,
		"deploy/kubernetes/base/deployment.yml": false,
		"server/config.go":                      true,
		"server/config_test.go":                 false,
	} {
		if got := dockerIncluded(ignore, path); got != want {
			t.Errorf("dockerIncluded(%q) = %v, want %v", path, got, want)
		}
	}
}

// ---------------------------------------------------------------- sluice check

// checkOK runs `sluice check` on paths and fails t unless every one is valid.
func checkOK(t *testing.T, paths ...string) {
	t.Helper()
	out, err := exec.Command(binary, append([]string{"check"}, paths...)...).CombinedOutput()
	if err != nil {
		t.Errorf("sluice check %s: %v\n%s", strings.Join(paths, " "), err, out)
	}
}

func TestSluiceCheck(t *testing.T) {
	checkOK(t, "envoy/ratelimit/", "kubernetes/base/ratelimit/", "kubernetes/base/policy.yaml")

	// The same check rejects a broken copy: it is not a check that cannot fail.
	edge, err := os.ReadFile("envoy/ratelimit/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "edge.yaml"), bytes.Replace(edge, []byte("unit: minute"), []byte("unit: minnute"), 1), 0o644)
	out, err := exec.Command(binary, "check", dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !bytes.Contains(out, []byte(`unknown unit "minnute"`)) {
		t.Errorf("sluice check of a broken edge.yaml: %v\n%s", err, out)
	}
}

// ---------------------------------------------------------------- Kubernetes

type kustomization struct {
	Resources          []string
	Patches            []struct{ Path string }
	ConfigMapGenerator []struct {
		Name  string
		Files []string
	} `yaml:"configMapGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"generatorOptions"`
}

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   struct {
		Name   string
		Labels map[string]string
	}
	Spec yaml.Node
}

type deployment struct {
	Replicas int
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	Template struct {
		Metadata struct {
			Labels      map[string]string
			Annotations map[string]string
		}
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot bool `yaml:"runAsNonRoot"`
				RunAsUser    int  `yaml:"runAsUser"`
			} `yaml:"securityContext"`
			Containers []container
			Volumes    []struct {
				Name      string
				ConfigMap struct{ Name string } `yaml:"configMap"`
			}
		}
	}
}

type container struct {
	Name  string
	Image string
	Args  []string
	Env   []envVar
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep struct{ Seconds int }
		} `yaml:"preStop"`
	}
	Resources struct {
		Requests map[string]string
		Limits   map[string]string
	}
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             bool  `yaml:"runAsNonRoot"`
		Capabilities             struct{ Drop []string }
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port string // a name or a number
	} `yaml:"httpGet"`
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type service struct {
	ClusterIP string `yaml:"clusterIP"`
	Selector  map[string]string
	Ports     []struct {
		Name        string
		Port        int
		TargetPort  string `yaml:"targetPort"`
		AppProtocol string `yaml:"appProtocol"`
	}
}

type networkPolicy struct {
	PodSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"podSelector"`
	PolicyTypes []string `yaml:"policyTypes"`
	Ingress     []struct {
		From  []map[string]any
		Ports []struct {
			Port     string
			Protocol string
		}
	}
}

type pdb struct {
	MinAvailable int `yaml:"minAvailable"`
	Selector     struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	var k kustomization
	decodeFile(t, filepath.Join(dir, "kustomization.yaml"), &k)
	return k
}

func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readObjects reads every document of the manifest files in dir's
// kustomization resources.
func readObjects(t *testing.T, dir string, k kustomization) []object {
	t.Helper()
	var objs []object
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization resource %s: %v", r, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o object
			err := dec.Decode(&o)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name", r)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// base is the base kustomization's Deployment and Services, decoded.
type base struct {
	dir        string
	k          kustomization
	deployment deployment
	services   map[string]service
	pdbs       []pdb
	netpols    []networkPolicy
}

func readBase(t *testing.T) base {
	t.Helper()
	b := base{dir: filepath.Join("kubernetes", "base"), services: map[string]service{}}
	b.k = readKustomization(t, b.dir)
	kinds := map[string]int{}
	for _, o := range readObjects(t, b.dir, b.k) {
		kinds[o.Kind]++
		var err error
		switch o.Kind {
		case "Deployment":
			if o.APIVersion != "apps/v1" {
				t.Errorf("Deployment apiVersion %q", o.APIVersion)
			}
			err = o.Spec.Decode(&b.deployment)
		case "Service":
			var s service
			err = o.Spec.Decode(&s)
			b.services[o.Metadata.Name] = s
		case "NetworkPolicy":
			if o.APIVersion != "networking.k8s.io/v1" {
				t.Errorf("NetworkPolicy apiVersion %q", o.APIVersion)
			}
			var p networkPolicy
			err = o.Spec.Decode(&p)
			b.netpols = append(b.netpols, p)
		case "PodDisruptionBudget":
			if o.APIVersion != "policy/v1" {
				t.Errorf("PodDisruptionBudget apiVersion %q", o.APIVersion)
			}
			var p pdb
			err = o.Spec.Decode(&p)
			b.pdbs = append(b.pdbs, p)
		default:
			t.Errorf("unexpected kind %s %s", o.Kind, o.Metadata.Name)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
		}
	}
	if kinds["Deployment"] != 1 || kinds["Service"] < 1 || kinds["PodDisruptionBudget"] != 1 {
		t.Fatalf("kinds %v: want one Deployment, Services, one PodDisruptionBudget", kinds)
	}
	if n := len(b.deployment.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return b
}

func (b base) container() container { return b.deployment.Template.Spec.Containers[0] }

// flag returns the value of --name=value or --name value in args.
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func TestKubernetesDeployment(t *testing.T) {
	b := readBase(t)
	d, c := b.deployment, b.container()
	want := listeners(t)

	if d.Replicas < 2 {
		t.Errorf("replicas %d, want 2 or more", d.Replicas)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("args %q: want serve first", c.Args)
	}
	// Each listener on all interfaces at sluice's port, a container port of
	// the listener's name with the same number.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, port := range want {
		v, ok := flag(c.Args, name)
		if !ok || v != fmt.Sprintf(":%d", port) {
			t.Errorf("--%s=%q, want :%d (all interfaces, sluice's port)", name, v, port)
		}
		if ports[name] != port {
			t.Errorf("container port %q = %d, want %d (--%s)", name, ports[name], port, name)
		}
	}
	if len(ports) != len(want) {
		t.Errorf("container ports %v: want exactly sluice's listeners", ports)
	}
	if got := d.Template.Metadata.Annotations["prometheus.io/port"]; got != strconv.Itoa(want["admin"]) {
		t.Errorf("prometheus.io/port %q, want the admin port %d", got, want["admin"])
	}

	// Probes on the admin listener: readiness /readyz, liveness /healthz.
	probePort := func(p probe) int {
		if n, err := strconv.Atoi(p.HTTPGet.Port); err == nil {
			return n
		}
		return ports[p.HTTPGet.Port]
	}
	for _, p := range []struct {
		kind, path string
		probe      probe
	}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", p.kind)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || probePort(p.probe) != want["admin"] {
			t.Errorf("%s: GET %s on port %q, want %s on the admin port %d", p.kind, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port, p.path, want["admin"])
		}
	}

	// Shutdown: the grace period covers the preStop sleep and sluice's drain.
	shutdown := 10 * time.Second // sluice's default
	if v, ok := flag(c.Args, "shutdown-timeout"); ok {
		var err error
		if shutdown, err = time.ParseDuration(v); err != nil {
			t.Fatalf("--shutdown-timeout=%q: %v", v, err)
		}
	}
	sleep := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(d.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if sleep <= 0 {
		t.Error("no preStop sleep: the pod would stop accepting before its endpoint is gone")
	}
	if grace <= sleep+shutdown {
		t.Errorf("terminationGracePeriodSeconds %v, want above preStop %v + --shutdown-timeout %v", grace, sleep, shutdown)
	}

	// Security.
	sc := c.SecurityContext
	if !d.Template.Spec.SecurityContext.RunAsNonRoot || d.Template.Spec.SecurityContext.RunAsUser == 0 {
		t.Error("pod securityContext: want runAsNonRoot and a non-zero runAsUser")
	}
	if !sc.RunAsNonRoot || !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container securityContext %+v: want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
	}

	// Resources, and the Go heap limit under the memory limit.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("resources.requests.%s missing", r)
		}
	}
	limit := quantity(t, c.Resources.Limits["memory"])
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && quantity(t, strings.TrimSuffix(e.Value, "B")) >= limit {
			t.Errorf("GOMEMLIMIT %s is not below the memory limit %s", e.Value, c.Resources.Limits["memory"])
		}
	}

	// Selectors.
	labels := d.Template.Metadata.Labels
	if !subset(d.Selector.MatchLabels, labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Selector.MatchLabels, labels)
	}
	for _, p := range b.pdbs {
		if !subset(p.Selector.MatchLabels, labels) || p.MinAvailable < 1 || p.MinAvailable >= d.Replicas {
			t.Errorf("PodDisruptionBudget %+v: want it to select the pods and allow one of %d replicas down", p, d.Replicas)
		}
	}

	// Every mount a ConfigMap of the kustomization's generators, read-only,
	// mounted whole (the kubelet updates no subPath mount).
	generated := map[string]bool{}
	for _, g := range b.k.ConfigMapGenerator {
		generated[g.Name] = true
	}
	volumes := map[string]string{}
	for _, v := range d.Template.Spec.Volumes {
		volumes[v.Name] = v.ConfigMap.Name
	}
	for _, m := range c.VolumeMounts {
		if !generated[volumes[m.Name]] || !m.ReadOnly {
			t.Errorf("volume mount %s: want a read-only ConfigMap of the kustomization (got %q)", m.Name, volumes[m.Name])
		}
	}
	if !b.k.GeneratorOptions.DisableNameSuffixHash {
		t.Error("configMapGenerator names get a hash suffix: an edit would roll the pods instead of reloading")
	}
}

// TestKubernetesNetworkPolicy: the pods are isolated for ingress; every
// port a Service offers is open, the admin port only to some peers (the
// kubelet's probes come from the node, which isolation never blocks), and
// no other port.
func TestKubernetesNetworkPolicy(t *testing.T) {
	b := readBase(t)
	labels := b.deployment.Template.Metadata.Labels
	if len(b.netpols) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(b.netpols))
	}
	np := b.netpols[0]
	if !subset(np.PodSelector.MatchLabels, labels) || len(np.PodSelector.MatchLabels) == 0 || !slices.Equal(np.PolicyTypes, []string{"Ingress"}) {
		t.Fatalf("NetworkPolicy selects %v for %v, want sluice's pods for Ingress", np.PodSelector.MatchLabels, np.PolicyTypes)
	}
	openToAll, openToSome := map[string]bool{}, map[string]bool{}
	for _, rule := range np.Ingress {
		if len(rule.Ports) == 0 {
			t.Errorf("an ingress rule without ports opens every port, admin's too")
		}
		for _, p := range rule.Ports {
			if len(rule.From) == 0 {
				openToAll[p.Port] = true
			} else {
				openToSome[p.Port] = true
			}
		}
	}
	if openToAll["admin"] || !openToSome["admin"] {
		t.Errorf("admin port: open to all %v, to some %v; want only to some (Prometheus)", openToAll["admin"], openToSome["admin"])
	}
	for name, s := range b.services {
		for _, p := range s.Ports {
			if !openToAll[p.TargetPort] {
				t.Errorf("Service %s port %s: the NetworkPolicy does not let clients in", name, p.Name)
			}
		}
	}
	for port := range openToAll {
		if port != "gateway" && port != "grpc" && port != "api" {
			t.Errorf("NetworkPolicy opens port %q to all", port)
		}
	}
	if slices.Contains(b.container().Args, "--pprof") {
		t.Errorf("the Deployment turns pprof on")
	}
}

func TestKubernetesServices(t *testing.T) {
	b := readBase(t)
	c := b.container()
	want := listeners(t)
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	labels := b.deployment.Template.Metadata.Labels
	svc, ok := b.services["sluice"]
	if !ok {
		t.Fatal("no Service named sluice")
	}
	exposed := map[string]bool{}
	for name, s := range b.services {
		if !subset(s.Selector, labels) || len(s.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the pods %v", name, s.Selector, labels)
		}
		for _, p := range s.Ports {
			n, ok := ports[p.TargetPort]
			if !ok {
				t.Errorf("Service %s port %s: targetPort %q names no container port", name, p.Name, p.TargetPort)
			}
			if p.Port != n || p.Name != p.TargetPort {
				t.Errorf("Service %s port %s: %d -> %s, want the container port's name and number (%d)", name, p.Name, p.Port, p.TargetPort, n)
			}
			if p.Name == "admin" {
				t.Errorf("Service %s exposes the admin port (/status, /debug/pprof)", name)
			}
			if p.Name == "grpc" && p.AppProtocol != "kubernetes.io/h2c" {
				t.Errorf("Service %s grpc appProtocol %q, want kubernetes.io/h2c", name, p.AppProtocol)
			}
			exposed[p.Name] = true
		}
	}
	for _, name := range []string{"gateway", "grpc", "api"} {
		found := false
		for _, p := range svc.Ports {
			found = found || p.Name == name && p.Port == want[name]
		}
		if !found {
			t.Errorf("Service sluice lacks port %s %d", name, want[name])
		}
	}
	if g, ok := b.services["sluice-grpc"]; ok && g.ClusterIP != "None" {
		t.Errorf("Service sluice-grpc clusterIP %q, want None (headless)", g.ClusterIP)
	}
}

func TestKubernetesConfigMaps(t *testing.T) {
	b := readBase(t)
	c := b.container()
	files := configMapFiles(t, b)

	// --policy and --rls point into mounted ConfigMaps, at files they hold.
	mounted := map[string]string{} // mount path -> ConfigMap
	volumes := map[string]string{}
	for _, v := range b.deployment.Template.Spec.Volumes {
		volumes[v.Name] = v.ConfigMap.Name
	}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = volumes[m.Name]
	}
	for _, name := range []string{"policy", "rls"} {
		v, ok := flag(c.Args, name)
		if !ok {
			t.Errorf("no --%s", name)
			continue
		}
		dir, file := v, ""
		if _, isDir := mounted[v]; !isDir {
			dir, file = filepath.Dir(v), filepath.Base(v)
		}
		cm, ok := mounted[dir]
		if !ok {
			t.Errorf("--%s=%s is in no mounted ConfigMap", name, v)
			continue
		}
		if file != "" {
			if _, ok := files[cm][file]; !ok {
				t.Errorf("--%s=%s: ConfigMap %s has no key %s", name, v, cm, file)
			}
		}
	}

	// The Kubernetes RLS config is the Envoy example's, byte for byte: one
	// Envoy configuration, one set of limits.
	envoyEdge, err := os.ReadFile("envoy/ratelimit/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, keys := range files {
		if path, ok := keys["edge.yaml"]; ok {
			found = true
			data, _ := os.ReadFile(path)
			if !bytes.Equal(data, envoyEdge) {
				t.Errorf("%s differs from envoy/ratelimit/edge.yaml; keep them the same", path)
			}
		}
	}
	if !found {
		t.Error("no ConfigMap holds edge.yaml")
	}
}

// configMapFiles maps each generated ConfigMap to its keys and their files.
func configMapFiles(t *testing.T, b base) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, g := range b.k.ConfigMapGenerator {
		out[g.Name] = map[string]string{}
		for _, f := range g.Files {
			key, path := filepath.Base(f), f
			if k, p, ok := strings.Cut(f, "="); ok {
				key, path = k, p
			}
			path = filepath.Join(b.dir, path)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("configMapGenerator %s: %v", g.Name, err)
			}
			out[g.Name][key] = path
		}
	}
	return out
}

// redisEnv is the Redis overlay's environment for the sluice container.
func redisEnv(t *testing.T) []envVar {
	t.Helper()
	dir := filepath.Join("kubernetes", "redis")
	k := readKustomization(t, dir)
	if !slices.Contains(k.Resources, "../base") || len(k.Patches) != 1 {
		t.Fatalf("redis overlay: resources %q patches %v, want ../base and one patch", k.Resources, k.Patches)
	}
	var patch struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     deployment
	}
	decodeFile(t, filepath.Join(dir, k.Patches[0].Path), &patch)
	if patch.Kind != "Deployment" || patch.Metadata.Name != "sluice" || len(patch.Spec.Template.Spec.Containers) != 1 || patch.Spec.Template.Spec.Containers[0].Name != readBase(t).container().Name {
		t.Fatalf("redis overlay patch: want the sluice Deployment's container")
	}
	return patch.Spec.Template.Spec.Containers[0].Env
}

func TestKubernetesRedisOverlay(t *testing.T) {
	env := map[string]envVar{}
	for _, e := range redisEnv(t) {
		if strings.HasPrefix(e.Name, "SLUICE_") && !knownEnv(e.Name) {
			t.Errorf("env %s: sluice reads no such variable", e.Name)
		}
		env[e.Name] = e
	}
	if env["SLUICE_STORE"].Value != "redis" || env["SLUICE_REDIS_ADDRS"].Value == "" {
		t.Errorf("redis overlay: want SLUICE_STORE=redis and SLUICE_REDIS_ADDRS")
	}
	if p := env["SLUICE_REDIS_PASSWORD"]; p.Value != "" || p.ValueFrom == nil || p.ValueFrom.SecretKeyRef == nil {
		t.Errorf("SLUICE_REDIS_PASSWORD: want it from a Secret, never a literal")
	}
	if s := env["SLUICE_FALLBACK_SCALE"].Value; s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if r := readBase(t).deployment.Replicas; err != nil || f != 1/float64(r) {
			t.Errorf("SLUICE_FALLBACK_SCALE %q, want 1/replicas = 1/%d", s, r)
		}
	}
	for _, e := range readBase(t).container().Env {
		if strings.HasPrefix(e.Name, "SLUICE_") && !knownEnv(e.Name) {
			t.Errorf("base env %s: sluice reads no such variable", e.Name)
		}
	}
}

// TestKustomizeBuild renders both kustomizations with kubectl, when it is
// installed, as kubectl apply -k would.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	for dir, want := range map[string][]string{
		"kubernetes":       {"kind: Deployment", "name: sluice-policy", "name: sluice-ratelimit", "kind: PodDisruptionBudget"},
		"kubernetes/redis": {"name: SLUICE_STORE", "value: redis", "name: sluice-redis", "name: GOMEMLIMIT"},
	} {
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
			continue
		}
		for _, w := range want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("kubectl kustomize %s: no %q in\n%s", dir, w, out)
			}
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// quantity reads a Kubernetes memory quantity (Ki, Mi, Gi or bytes).
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if s, ok := strings.CutSuffix(q, suffix); ok {
			q, mult = s, m
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", q, err)
	}
	return n * mult
}

// ---------------------------------------------------------------- Envoy

// envoyConfig is deploy/envoy/envoy.yaml read strictly into Envoy's own
// bootstrap message: an unknown or misspelt field anywhere, including inside
// typed configs, is an error, and so is a value Envoy's validation rules
// reject.
type envoyConfig struct {
	bootstrap *bootstrapv3.Bootstrap
	hcm       *hcmv3.HttpConnectionManager
	filter    *ratelimitv3.RateLimit
	clusters  map[string]*clusterv3.Cluster
}

func parseEnvoy(data []byte) (*envoyConfig, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	cfg := &envoyConfig{bootstrap: &bootstrapv3.Bootstrap{}, clusters: map[string]*clusterv3.Cluster{}}
	if err := protojson.Unmarshal(js, cfg.bootstrap); err != nil {
		return nil, err
	}
	// ValidateAll does not look inside typed configs (Any): those are
	// validated below, once unpacked.
	if err := cfg.bootstrap.ValidateAll(); err != nil {
		return nil, err
	}
	for _, c := range cfg.bootstrap.GetStaticResources().GetClusters() {
		cfg.clusters[c.GetName()] = c
	}
	for _, l := range cfg.bootstrap.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				if err := hcm.ValidateAll(); err != nil {
					return nil, err
				}
				for _, hf := range hcm.GetHttpFilters() {
					rl := &ratelimitv3.RateLimit{}
					if hf.GetTypedConfig().UnmarshalTo(rl) == nil {
						if err := rl.ValidateAll(); err != nil {
							return nil, err
						}
						if cfg.filter != nil {
							return nil, fmt.Errorf("more than one rate limit filter")
						}
						cfg.hcm, cfg.filter = hcm, rl
					}
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if a, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; ok {
							per := &ratelimitv3.RateLimitPerRoute{}
							if err := a.UnmarshalTo(per); err != nil {
								return nil, err
							}
							if err := per.ValidateAll(); err != nil {
								return nil, err
							}
						}
					}
				}
			}
		}
	}
	if cfg.filter == nil {
		return nil, fmt.Errorf("no envoy.filters.http.ratelimit filter")
	}
	return cfg, nil
}

func readEnvoy(t *testing.T) *envoyConfig {
	t.Helper()
	data, err := os.ReadFile("envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseEnvoy(data)
	if err != nil {
		t.Fatalf("envoy/envoy.yaml: %v", err)
	}
	return cfg
}

func TestEnvoyConfig(t *testing.T) {
	cfg := readEnvoy(t)
	f := cfg.filter
	if f.GetFailureModeDeny() {
		t.Error("failure_mode_deny: want false (sluice unreachable: admit)")
	}
	if f.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
		t.Errorf("transport_api_version %v, want V3", f.GetRateLimitService().GetTransportApiVersion())
	}
	var edge struct{ Domain string }
	decodeFile(t, "envoy/ratelimit/edge.yaml", &edge)
	if f.GetDomain() != edge.Domain {
		t.Errorf("filter domain %q, ratelimit/edge.yaml's %q", f.GetDomain(), edge.Domain)
	}

	// The filter's cluster exists, speaks HTTP/2, at sluice's gRPC port,
	// health-checked with the service name sluice serves.
	name := f.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	rls, ok := cfg.clusters[name]
	if !ok {
		t.Fatalf("the rate limit filter names cluster %q, which is not defined", name)
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	anyOpts, ok := rls.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok || anyOpts.UnmarshalTo(opts) != nil || opts.ValidateAll() != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s: want HttpProtocolOptions with explicit http2_protocol_options (gRPC)", name)
	}
	for _, lle := range rls.GetLoadAssignment().GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			if p := int(e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()); p != listeners(t)["grpc"] {
				t.Errorf("cluster %s endpoint port %d, want sluice's grpc port %d", name, p, listeners(t)["grpc"])
			}
		}
	}
	for _, hc := range rls.GetHealthChecks() {
		if s := hc.GetGrpcHealthCheck().GetServiceName(); s != rlspb.RateLimitService_ServiceDesc.ServiceName {
			t.Errorf("cluster %s gRPC health check service %q, want %q", name, s, rlspb.RateLimitService_ServiceDesc.ServiceName)
		}
	}

	// Every route goes to a defined cluster; there are rate limit actions.
	actions := 0
	for _, vh := range cfg.hcm.GetRouteConfig().GetVirtualHosts() {
		actions += len(vh.GetRateLimits())
		for _, r := range vh.GetRoutes() {
			if _, ok := cfg.clusters[r.GetRoute().GetCluster()]; !ok {
				t.Errorf("route %s: cluster %q is not defined", r.GetMatch().GetPrefix(), r.GetRoute().GetCluster())
			}
			actions += len(r.GetRoute().GetRateLimits())
		}
	}
	if actions == 0 {
		t.Error("no rate_limits: Envoy would never call sluice")
	}

	// The strict reading catches a misspelt field, and a bad value.
	data, _ := os.ReadFile("envoy/envoy.yaml")
	for _, bad := range [][2]string{
		{"failure_mode_deny:", "failure_mode_denny:"},
		{"descriptor_key: api_key", "descriptor_kee: api_key"},
		{"port_value: 8081", "port_value: 80810"},
	} {
		if !bytes.Contains(data, []byte(bad[0])) {
			t.Fatalf("envoy.yaml has no %q to break", bad[0])
		}
		if _, err := parseEnvoy(bytes.Replace(data, []byte(bad[0]), []byte(bad[1]), 1)); err == nil {
			t.Errorf("envoy.yaml with %q: no error", bad[1])
		}
	}
}

// request is what Envoy knows of a request when it builds descriptors.
type request struct {
	remote  string
	path    string
	headers map[string]string
}

// descriptors builds the descriptors Envoy sends for req, from the virtual
// host's and the matching route's rate_limits, as Envoy's rate limit actions
// do. It knows the actions the configuration uses and fails on any other.
func descriptors(t *testing.T, cfg *envoyConfig, req request) []*commonpb.RateLimitDescriptor {
	t.Helper()
	vh := cfg.hcm.GetRouteConfig().GetVirtualHosts()[0]
	var route *routev3.Route
	for _, r := range vh.GetRoutes() {
		if strings.HasPrefix(req.path, r.GetMatch().GetPrefix()) {
			route = r
			break
		}
	}
	if route == nil {
		t.Fatalf("no route for %s", req.path)
	}
	limits := route.GetRoute().GetRateLimits()
	includeVH := len(limits) == 0
	if a, ok := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; ok {
		per := &ratelimitv3.RateLimitPerRoute{}
		if err := a.UnmarshalTo(per); err != nil {
			t.Fatal(err)
		}
		switch per.GetVhRateLimits() {
		case ratelimitv3.RateLimitPerRoute_INCLUDE:
			includeVH = true
		case ratelimitv3.RateLimitPerRoute_IGNORE:
			includeVH = false
		}
	}
	if includeVH {
		limits = append(slices.Clone(limits), vh.GetRateLimits()...)
	}
	var out []*commonpb.RateLimitDescriptor
next:
	for _, l := range limits {
		d := &commonpb.RateLimitDescriptor{}
		for _, a := range l.GetActions() {
			var key, value string
			switch {
			case a.GetGenericKey() != nil:
				key, value = a.GetGenericKey().GetDescriptorKey(), a.GetGenericKey().GetDescriptorValue()
				if key == "" {
					key = "generic_key"
				}
			case a.GetRemoteAddress() != nil:
				key, value = "remote_address", req.remote
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := req.headers[h.GetHeaderName()]
				if !ok {
					if h.GetSkipIfAbsent() {
						continue
					}
					continue next // Envoy sends no descriptor for this entry
				}
				key, value = h.GetDescriptorKey(), v
			default:
				t.Fatalf("rate limit action %v: this test does not model it; add it to descriptors()", a)
			}
			d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: key, Value: value})
		}
		out = append(out, d)
	}
	return out
}

// ---------------------------------------------------------------- sluice as deployed

// pod is a running sluice with the Deployment's arguments, its ConfigMaps
// laid out as the kubelet mounts them, and the Redis overlay's environment.
type pod struct {
	*proctest.Proc
	addrs  map[string]string
	mounts map[string]string // mount path -> directory standing in for it
}

// mountConfigMap writes files as the kubelet does: the data in a timestamped
// directory, a ..data symlink to it, and one symlink per key through ..data.
func mountConfigMap(t *testing.T, dir, version string, files map[string][]byte) {
	t.Helper()
	data := filepath.Join(dir, "..v"+version)
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(data, k), v, 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v"+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil { // atomic, as the kubelet
		t.Fatal(err)
	}
}

func startPod(t *testing.T) *pod {
	t.Helper()
	b := readBase(t)
	c := b.container()
	files := configMapFiles(t, b)
	volumes := map[string]string{}
	for _, v := range b.deployment.Template.Spec.Volumes {
		volumes[v.Name] = v.ConfigMap.Name
	}
	fs := t.TempDir()
	p := &pod{mounts: map[string]string{}}
	names := listeners(t)
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(fs, m.MountPath)
		content := map[string][]byte{}
		for key, path := range files[volumes[m.Name]] {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			content[key] = data
		}
		mountConfigMap(t, dir, "1", content)
		p.mounts[m.MountPath] = dir
	}

	// The Deployment's arguments, listeners on free loopback ports, paths
	// into the mounts.
	var args []string
	for _, a := range c.Args {
		name, v, isFlag := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, ok := names[name]; isFlag && ok {
			a = "--" + name + "=127.0.0.1:0"
		}
		for mp, dir := range p.mounts {
			if isFlag && (v == mp || strings.HasPrefix(v, mp+"/")) {
				a = "--" + name + "=" + dir + strings.TrimPrefix(v, mp)
			}
		}
		args = append(args, a)
	}

	// The environment: the base's and the Redis overlay's, on the test's
	// Redis, without the harness's own SLUICE_* variables.
	env := proctest.CleanEnv()
	redisAddr := redistest.Standalone(t).Options().Addr
	for _, e := range append(slices.Clone(c.Env), redisEnv(t)...) {
		switch {
		case e.Name == "SLUICE_REDIS_ADDRS":
			env = append(env, e.Name+"="+redisAddr)
		case e.ValueFrom != nil: // the Secret: the test's Redis has no password
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	env = append(env, "SLUICE_REDIS_PREFIX="+redistest.Prefix(t))

	p.Proc = proctest.Start(t, binary, env, args...)
	p.addrs = map[string]string{}
	for name := range names {
		p.addrs[name] = p.Addr(name)
	}
	return p
}

func get(t *testing.T, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestAsDeployed runs sluice as the Deployment and the Redis overlay
// configure it, then probes it as the kubelet, calls it as Envoy, scrapes it
// as Prometheus and checks the dashboard against what it exports, swaps its
// RLS ConfigMap, and stops it as Kubernetes does.
func TestAsDeployed(t *testing.T) {
	p := startPod(t)
	b := readBase(t)
	c := b.container()
	admin := "http://" + p.addrs["admin"]

	// The kubelet's probes.
	for _, pr := range []probe{c.ReadinessProbe, c.LivenessProbe} {
		if resp, body := get(t, admin+pr.HTTPGet.Path, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("probe GET %s: %d %s", pr.HTTPGet.Path, resp.StatusCode, body)
		}
	}

	// Envoy: health check, then the descriptors envoy.yaml builds, each of
	// which a limit of edge.yaml must govern.
	envoy := readEnvoy(t)
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, hc := range envoy.clusters[envoy.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()].GetHealthChecks() {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: hc.GetGrpcHealthCheck().GetServiceName()})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health check %q: %v %v", hc.GetGrpcHealthCheck().GetServiceName(), resp, err)
		}
	}
	rls := rlspb.NewRateLimitServiceClient(conn)
	login := request{remote: "203.0.113.7", path: "/login", headers: map[string]string{"x-api-key": "k-123"}}
	descs := descriptors(t, envoy, login)
	if len(descs) != 4 {
		t.Fatalf("/login with an API key: %d descriptors, want 4 (3 of the virtual host, 1 of the route)", len(descs))
	}
	var edge struct {
		Descriptors []struct {
			Key, Value  string
			Descriptors []struct {
				Key       string
				RateLimit struct {
					RequestsPerUnit int `yaml:"requests_per_unit"`
				} `yaml:"rate_limit"`
			}
		}
	}
	decodeFile(t, "envoy/ratelimit/edge.yaml", &edge)
	loginLimit := 0
	for _, d := range edge.Descriptors {
		if d.Key == "generic_key" && d.Value == "login" && len(d.Descriptors) == 1 {
			loginLimit = d.Descriptors[0].RateLimit.RequestsPerUnit
		}
	}
	if loginLimit == 0 {
		t.Fatal("edge.yaml: no generic_key=login / remote_address limit")
	}
	shouldRateLimit := func(ds []*commonpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: envoy.filter.GetDomain(), Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	for i := 1; i <= loginLimit+1; i++ {
		resp := shouldRateLimit(descs)
		for j, s := range resp.GetStatuses() {
			if s.GetCurrentLimit() == nil {
				t.Errorf("descriptor %v matches no limit of edge.yaml", descs[j].GetEntries())
			}
		}
		want := rlspb.RateLimitResponse_OK
		if i > loginLimit {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want {
			t.Fatalf("login attempt %d: %v, want %v (%d a minute)", i, resp.GetOverallCode(), want, loginLimit)
		}
	}
	// Another path sends the virtual host's descriptors only, still admitted.
	if resp := shouldRateLimit(descriptors(t, envoy, request{remote: "203.0.113.7", path: "/", headers: nil})); resp.GetOverallCode() != rlspb.RateLimitResponse_OK || len(resp.GetStatuses()) != 2 {
		t.Errorf("GET / without an API key: %v with %d statuses, want OK with 2", resp.GetOverallCode(), len(resp.GetStatuses()))
	}

	// The gateway, until its policy refuses (bounded).
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		resp, _ := get(t, "http://"+p.addrs["gateway"]+"/", nil)
		refused = resp.StatusCode == http.StatusTooManyRequests
	}
	if !refused {
		t.Error("the gateway admitted 200 requests of one client in a row")
	}

	// Prometheus: every metric of the dashboard is exported, with the
	// labels it uses.
	families := scrape(t, admin+"/metrics")
	dash, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if problems := dashboardProblems(dash, families); len(problems) > 0 {
		t.Errorf("grafana/sluice-dashboard.json:\n%s", strings.Join(problems, "\n"))
	}
	for _, name := range []string{"sluice_decisions_total", "sluice_failover_breaker_state", "sluice_store_duration_seconds"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// A ConfigMap update: the kubelet swaps ..data; sluice reloads the RLS
	// directory without a restart. Halve the login limit and see it applied.
	edgeData, _ := os.ReadFile("envoy/ratelimit/edge.yaml")
	mp, _ := flag(c.Args, "rls")
	newLimit := loginLimit / 2
	swapped := regexp.MustCompile(fmt.Sprintf(`(?m)(name: login-per-ip\n\s+unit: minute\n\s+requests_per_unit: )%d`, loginLimit)).ReplaceAll(edgeData, fmt.Appendf(nil, "${1}%d", newLimit))
	if bytes.Equal(swapped, edgeData) {
		t.Fatal("could not find the login limit in edge.yaml to change it")
	}
	mountConfigMap(t, p.mounts[mp], "2", map[string][]byte{"edge.yaml": swapped})
	deadline := time.Now().Add(10 * time.Second)
	for client := 1; ; client++ {
		// A fresh client each round: refused after newLimit attempts once
		// reloaded, after loginLimit before.
		ds := descriptors(t, envoy, request{remote: fmt.Sprintf("198.51.100.%d", client), path: "/login"})
		var code rlspb.RateLimitResponse_Code
		for range newLimit + 1 {
			code = shouldRateLimit(ds).GetOverallCode()
		}
		if code == rlspb.RateLimitResponse_OVER_LIMIT {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the ConfigMap swap, the login limit is still %d", loginLimit)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Kubernetes stops the pod with SIGTERM: sluice drains and exits 0
	// within --shutdown-timeout.
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			t.Errorf("after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("sluice still runs 20s after SIGTERM")
	}
}

// ---------------------------------------------------------------- Prometheus and Grafana

// family is one metric family of an exposition: its type and label names.
type family struct {
	typ    string
	labels map[string]bool
}

func scrape(t *testing.T, url string) map[string]*family {
	t.Helper()
	resp, body := get(t, url, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return parseExposition(body)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// parseExposition reads the Prometheus text format: families from # TYPE,
// label names from the samples (histogram series under their family).
func parseExposition(text string) map[string]*family {
	fams := map[string]*family{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = &family{typ: f[3], labels: map[string]bool{}}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fam := fams[m[1]]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m[1], suffix); ok && fam == nil {
				fam = fams[base]
			}
		}
		if fam == nil {
			continue
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			fam.labels[l[1]] = true
		}
	}
	return fams
}

var (
	metricRef = regexp.MustCompile(`\b(sluice_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	byClause  = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// scrapeLabels are added by Prometheus to every series it scrapes.
var scrapeLabels = map[string]bool{"job": true, "instance": true}

// dashboardProblems lists every query of the dashboard (panels and template
// variables) that names a metric sluice does not export, a label that
// metric does not have, or groups by a label none of its metrics has.
func dashboardProblems(dashboard []byte, fams map[string]*family) []string {
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
			Panels  []struct {
				Title   string
				Targets []struct{ Expr string }
			}
		}
		Templating struct {
			List []struct {
				Name  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(dashboard, &dash); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	type query struct{ where, expr string }
	var queries []query
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, tg.Expr})
		}
		for _, sub := range p.Panels {
			for _, tg := range sub.Targets {
				queries = append(queries, query{"panel " + sub.Title, tg.Expr})
			}
		}
	}
	for _, v := range dash.Templating.List {
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			queries = append(queries, query{"variable " + v.Name, q.Query})
		}
	}
	var problems []string
	if len(queries) == 0 {
		problems = append(problems, "no queries")
	}
	for _, q := range queries {
		refs := metricRef.FindAllStringSubmatch(q.expr, -1)
		if len(refs) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %q names no sluice metric", q.where, q.expr))
			continue
		}
		known := map[string]bool{"le": true}
		for k := range scrapeLabels {
			known[k] = true
		}
		for _, r := range refs {
			name := r[1]
			fam := fams[name]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && fam == nil && fams[base] != nil && fams[base].typ == "histogram" {
					fam = fams[base]
				}
			}
			if fam == nil {
				problems = append(problems, fmt.Sprintf("%s: sluice exports no metric %s", q.where, name))
				continue
			}
			for l := range fam.labels {
				known[l] = true
			}
			for _, l := range labelName.FindAllStringSubmatch(strings.NewReplacer("=~", "=", "!=", "=", "!~", "=").Replace(r[2]), -1) {
				if !fam.labels[l[1]] && !scrapeLabels[l[1]] {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s", q.where, name, l[1]))
				}
			}
		}
		for _, by := range byClause.FindAllStringSubmatch(q.expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !known[l] {
					problems = append(problems, fmt.Sprintf("%s: grouped by %s, a label of none of its metrics", q.where, l))
				}
			}
		}
	}
	return problems
}

// TestDashboardChecker shows the dashboard check failing on a renamed metric,
// a wrong label and a wrong grouping, against an exposition like sluice's.
func TestDashboardChecker(t *testing.T) {
	fams := parseExposition(`# HELP sluice_decisions_total x
# TYPE sluice_decisions_total counter
sluice_decisions_total{degraded="false",limit="per-ip",outcome="admitted",source="gateway"} 3
# TYPE sluice_store_duration_seconds histogram
sluice_store_duration_seconds_bucket{op="take",le="0.001"} 1
sluice_store_duration_seconds_sum{op="take"} 0.0001
sluice_store_duration_seconds_count{op="take"} 1
# TYPE sluice_build_info gauge
sluice_build_info{version="v1"} 1
`)
	dash := func(exprs ...string) []byte {
		var targets []map[string]string
		for _, e := range exprs {
			targets = append(targets, map[string]string{"expr": e})
		}
		b, _ := json.Marshal(map[string]any{"panels": []any{map[string]any{"title": "p", "targets": targets}}})
		return b
	}
	good := dash(`sum by (outcome) (rate(sluice_decisions_total{job=~"$job", outcome="refused"}[5m]))`,
		`histogram_quantile(0.99, sum by (le, op) (rate(sluice_store_duration_seconds_bucket[5m])))`,
		`sluice_build_info`)
	if p := dashboardProblems(good, fams); len(p) > 0 {
		t.Errorf("good dashboard: %q", p)
	}
	for _, bad := range []string{
		`rate(sluice_decisions_count[5m])`,                 // renamed metric
		`rate(sluice_decisions_total{rule="x"}[5m])`,       // no such label
		`sum by (rule) (rate(sluice_decisions_total[5m]))`, // grouping by a missing label
		`rate(sluice_decisions_total_bucket[5m])`,          // a counter has no buckets
		`up`, // not a sluice metric
		`histogram_quantile(0.5, sum by (le) (rate(sluice_store_duration_seconds_bucket{operation="take"}[5m])))`,
	} {
		if p := dashboardProblems(dash(bad), fams); len(p) == 0 {
			t.Errorf("%s: no problem found", bad)
		}
	}
}

// TestDashboardJSON checks the dashboard's own structure: valid JSON, unique
// panel ids, every query panel on the templated data source.
func TestDashboardJSON(t *testing.T) {
	data, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID           string
		Title         string
		SchemaVersion int `json:"schemaVersion"`
		Panels        []struct {
			ID         int
			Type       string
			Title      string
			Datasource *struct{ UID string }
			Targets    []struct {
				Expr  string
				RefID string `json:"refId"`
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion == 0 {
		t.Errorf("uid %q title %q schemaVersion %d: want all set", dash.UID, dash.Title, dash.SchemaVersion)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: want queries on ${datasource}", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: a query without expr or with a missing or repeated refId", p.Title)
			}
			refs[tg.RefID] = true
		}
	}
}
