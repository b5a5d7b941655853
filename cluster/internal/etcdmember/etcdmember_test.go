package etcdmember

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
)

// TestEtcdMemberCallsTimeOut: a member list, add, promote or remove
// against an etcd that stops answering (partitioned: a proxy that goes
// silent; stopped: the server closed) returns within the command
// timeout, saying that quorum is lost or the members are unreachable and
// what to do, instead of hanging the join or the removal. Real embedded
// etcd.
func TestEtcdMemberCallsTimeOut(t *testing.T) {
	const timeout = 700 * time.Millisecond
	calls := map[string]func(context.Context, *etcdwatch.Client) error{
		"member list": func(ctx context.Context, cli *etcdwatch.Client) error {
			_, err := List(ctx, cli)
			return err
		},
		"member add (learner)": func(ctx context.Context, cli *etcdwatch.Client) error {
			_, err := AddLearner(ctx, cli, "https://10.250.0.9:2380")
			return err
		},
		"member remove": func(ctx context.Context, cli *etcdwatch.Client) error {
			return request(ctx, cli, "member remove", func(ctx context.Context) error {
				_, err := cli.MemberRemove(ctx, 42)
				return err
			})
		},
	}
	for _, how := range []string{"partitioned", "stopped"} {
		for name, call := range calls {
			t.Run(how+"/"+name, func(t *testing.T) {
				srv, err := etcdtest.Start(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				stopped := false
				defer func() {
					if !stopped {
						srv.Close()
					}
				}()
				ep := srv.Endpoint
				if how == "partitioned" {
					ep = etcdtest.StallAfterT(t, srv.Endpoint, 1) // the connection check, then silence
				}
				ctx := context.Background()
				cli, err := etcdwatch.Connect(ctx, etcdwatch.ConnOptions{Endpoints: []string{ep}, CommandTimeout: timeout})
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				if how == "stopped" {
					srv.Close()
					stopped = true
				}
				start := time.Now()
				err = call(ctx, cli)
				took := time.Since(start)
				if err == nil {
					t.Fatal("no error from an etcd that does not answer")
				}
				for _, want := range []string{"did not answer within 700ms", "lost quorum", "unreachable", "devk up", "run this again"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q: %v", want, err)
					}
				}
				if took < timeout || took > timeout+3*time.Second {
					t.Errorf("returned after %s, want about %s", took, timeout)
				}
			})
		}
	}
	// A healthy etcd answers within it.
	srv, _ := etcdtest.StartT(t)
	cli, err := etcdwatch.Connect(context.Background(), etcdwatch.ConnOptions{Endpoints: []string{srv.Endpoint}, CommandTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if ms, err := List(context.Background(), cli); err != nil || len(ms) != 1 {
		t.Errorf("member list of a healthy etcd: %v %v", ms, err)
	}
}

// TestConnectMissingFiles: certificate files that are not there are
// named as such, not blamed on quorum (a removal resumed after its files
// phase connects with node 0's certificates, which are there).
func TestConnectMissingFiles(t *testing.T) {
	_, err := Connect(context.Background(), []string{"https://10.250.0.3:2379"}, t.TempDir(), 0)
	if err == nil || !strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "quorum") {
		t.Errorf("missing certificates: %v", err)
	}
}

func TestInitialCluster(t *testing.T) {
	ms := []*Member{
		{ID: 1, Name: "b", PeerURLs: []string{"https://10.250.0.3:2380"}},
		{ID: 2, Name: "a", PeerURLs: []string{"https://10.250.0.2:2380"}},
		{ID: 3, PeerURLs: []string{"https://10.250.0.4:2380"}, IsLearner: true},
	}
	self := Find(ms, "https://10.250.0.4:2380")
	if self == nil || self.ID != 3 {
		t.Fatalf("Find: %+v", self)
	}
	if got, want := InitialCluster(ms, self, "c"), "a=https://10.250.0.2:2380,b=https://10.250.0.3:2380,c=https://10.250.0.4:2380"; got != want {
		t.Errorf("initial cluster %s, want %s", got, want)
	}
	if Find(ms, "https://10.250.0.9:2380") != nil {
		t.Error("a peer URL no member has was found")
	}
}
