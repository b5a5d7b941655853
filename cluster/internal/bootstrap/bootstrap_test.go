package bootstrap

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

func TestControlPlanePatch(t *testing.T) {
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	cpTaint := corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}
	marked := map[string]string{LabelControlPlane: "", labelExcludeLB: ""}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		taint  bool
		noop   bool
	}{
		{name: "fresh node with another taint", labels: map[string]string{"kubernetes.io/hostname": "n"}, taints: []corev1.Taint{notReady}},
		{name: "fresh node with another taint, --keep-taint", labels: map[string]string{"kubernetes.io/hostname": "n"}, taints: []corev1.Taint{notReady}, taint: true},
		{name: "labelled, not tainted", labels: marked, noop: true},
		{name: "labelled, not tainted, --keep-taint", labels: marked, taint: true},
		{name: "tainted, not labelled", taints: []corev1.Taint{cpTaint}},
		{name: "tainted, not labelled, --keep-taint", taints: []corev1.Taint{cpTaint}, taint: true},
		{name: "marked and tainted (an older devk's node)", labels: marked, taints: []corev1.Taint{notReady, cpTaint}},
		{name: "marked and tainted, --keep-taint", labels: marked, taints: []corev1.Taint{notReady, cpTaint}, taint: true, noop: true},
		{name: "the taint alone", labels: marked, taints: []corev1.Taint{cpTaint}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "42", Labels: tt.labels}, Spec: corev1.NodeSpec{Taints: tt.taints}}
			patch, err := controlPlanePatch(n, tt.taint)
			if err != nil {
				t.Fatal(err)
			}
			if tt.noop {
				if patch != nil {
					t.Fatalf("patch %s for a node that is as wanted", patch)
				}
				return
			}
			if patch == nil {
				t.Fatal("no patch for a node that is not as wanted")
			}
			var p struct {
				Metadata struct{ ResourceVersion string }
			}
			if err := json.Unmarshal(patch, &p); err != nil || p.Metadata.ResourceVersion != "42" {
				t.Errorf("patch %s does not carry the node's resourceVersion as a precondition", patch)
			}
			orig, _ := json.Marshal(n)
			merged, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.Node{})
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.Node
			if err := json.Unmarshal(merged, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.labels {
				if got.Labels[k] != v {
					t.Errorf("label %s lost: %v", k, got.Labels)
				}
			}
			for k := range marked {
				if _, ok := got.Labels[k]; !ok {
					t.Errorf("label %s missing: %v", k, got.Labels)
				}
			}
			for _, want := range tt.taints {
				if want != cpTaint && !slices.Contains(got.Spec.Taints, want) {
					t.Errorf("taint %v lost: %v", want, got.Spec.Taints)
				}
			}
			want := 0
			if tt.taint {
				want = 1
			}
			if n := len(slices.DeleteFunc(slices.Clone(got.Spec.Taints), func(t corev1.Taint) bool { return t != cpTaint })); n != want {
				t.Errorf("taints %v: the control-plane taint %d times, want %d", got.Spec.Taints, n, want)
			}
		})
	}
}

func TestBootstrapTokens(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, err := NewToken(now)
	if err != nil {
		t.Fatal(err)
	}
	if !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(tok.ID, tok.Secret)) || !tok.Expires.Equal(now.Add(TokenTTL)) {
		t.Fatalf("new token %+v", tok)
	}
	secretOf := func(tok Token, description string) corev1.Secret {
		ac := tok.secret()
		s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: *ac.Name, Namespace: *ac.Namespace}, Type: *ac.Type, Data: ac.Data}
		s.Data[bootstrapapi.BootstrapTokenDescriptionKey] = []byte(description)
		return s
	}
	s := secretOf(tok, tokenDescription)
	if s.Name != "bootstrap-token-"+tok.ID || s.Type != bootstrapapi.SecretTypeBootstrapToken || string(s.Data["auth-extra-groups"]) != NodeBootstrappersGroup ||
		string(s.Data["usage-bootstrap-authentication"]) != "true" || string(s.Data["usage-bootstrap-signing"]) != "true" {
		t.Errorf("secret %s (%s): %q", s.Name, s.Type, s.Data)
	}
	someoneElses, _ := NewToken(now)
	for _, tt := range []struct {
		name    string
		secrets []corev1.Secret
		at      time.Time
		reuse   bool
	}{
		{"devk's, fresh", []corev1.Secret{secretOf(tok, tokenDescription)}, now, true},
		{"devk's, with two hours left", []corev1.Secret{secretOf(tok, tokenDescription)}, now.Add(TokenTTL - 2*time.Hour), true},
		{"devk's, with half an hour left", []corev1.Secret{secretOf(tok, tokenDescription)}, now.Add(TokenTTL - 30*time.Minute), false},
		{"devk's, expired", []corev1.Secret{secretOf(tok, tokenDescription)}, now.Add(TokenTTL + time.Hour), false},
		{"not devk's", []corev1.Secret{secretOf(someoneElses, "kubeadm's")}, now, false},
		{"none", nil, now, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := reusableToken(tt.secrets, tt.at)
			if ok != tt.reuse || (ok && (got.ID != tok.ID || got.Secret != tok.Secret || !got.Expires.Equal(tok.Expires))) {
				t.Errorf("reusableToken = %+v, %v; want reuse %v of %+v", got, ok, tt.reuse, tok)
			}
		})
	}
}
