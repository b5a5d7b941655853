package layout

import (
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestSpecGates(t *testing.T) {
	s := Spec{FeatureGates: map[string]bool{"A": true, "B": true}, APIServer: Component{FeatureGates: map[string]bool{"B": false, "C": true}}}
	if g := s.Gates(s.APIServer); !reflect.DeepEqual(g, map[string]bool{"A": true, "B": false, "C": true}) {
		t.Errorf("apiserver gates %v", g)
	}
	if g := s.Gates(s.Kubelet); !reflect.DeepEqual(g, map[string]bool{"A": true, "B": true}) {
		t.Errorf("kubelet gates %v", g)
	}
	if s.FeatureGates["B"] != true {
		t.Error("Gates changed the spec's own map")
	}
	if g := (Spec{}).Gates(Component{}); g != nil {
		t.Errorf("no gates: %v, want nil", g)
	}
}

// TestSpecInClusterJSON: a cluster without a spec writes none; one with
// a spec reads it back.
func TestSpecInClusterJSON(t *testing.T) {
	c := NewConfig(DefaultName)
	_, n, _ := net.ParseCIDR("10.250.0.0/24")
	if err := c.PlaceAt(n, nil, nil); err != nil {
		t.Fatal(err)
	}
	data, _ := EncodeConfig(c)
	if strings.Contains(string(data), `"spec"`) {
		t.Errorf("an empty spec is written: %s", data)
	}
	no := false
	c.Spec = Spec{Kubelet: Component{ExtraArgs: map[string]string{"v": "3"}}, Addons: Addons{CoreDNS: &no}}
	data, _ = EncodeConfig(c)
	back, err := ParseConfig(data, DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Spec, c.Spec) || On(back.Spec.Addons.CoreDNS) || !On(back.Spec.Addons.KubeProxy) {
		t.Errorf("spec read back as %+v", back.Spec)
	}
}

func TestPlaceAt(t *testing.T) {
	_, n, _ := net.ParseCIDR("10.250.3.0/24")
	_, route, _ := net.ParseCIDR("10.250.3.128/25")
	other := NewConfig("other")
	_, on, _ := net.ParseCIDR("10.250.0.0/22")
	other.place(on)
	c := NewConfig(DefaultName)
	if err := c.PlaceAt(n, nil, []*net.IPNet{route}); err == nil || !strings.Contains(err.Error(), "the host's route or address 10.250.3.128/25") {
		t.Errorf("a host route: %v", err)
	}
	if err := c.PlaceAt(n, []Config{other}, nil); err == nil || !strings.Contains(err.Error(), "devk cluster other's nodes (10.250.0.0/22)") {
		t.Errorf("another cluster: %v", err)
	}
	if err := c.PlaceAt(n, nil, nil); err != nil || c.FirstNode().IP != "10.250.3.2" || c.Network.HostIP != "10.250.3.1" {
		t.Errorf("placed: %v, node %s host %s", err, c.FirstNode().IP, c.Network.HostIP)
	}
}
