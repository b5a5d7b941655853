// Package etcdmember changes the membership of a cluster's stacked etcd
// as a control-plane join and removal need it: kubeadm's etcd member
// calls (its util/etcd), each bounded so that a cluster that has lost
// quorum is reported, not waited on forever. cluster's etcd join and
// removal phases call it with a client to the other members.
package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/pki"
)

// unavailableAdvice says what to do when the cluster's etcd does not
// answer a member call in time.
const unavailableAdvice = "the cluster's etcd has lost quorum (more than half of its members are down) or its members are unreachable: " +
	"check `devk status`, bring the stopped control-plane nodes back (`devk up`), then run this again"

// Connect connects to the etcd members at endpoints with the API
// server's etcd client certificate in pkiDir, each member call bounded by
// commandTimeout (0: etcdwatch.DefaultCommandTimeout). Missing
// certificate files are named as such; any other failure says that
// quorum may be lost.
func Connect(ctx context.Context, endpoints []string, pkiDir string, commandTimeout time.Duration) (*etcdwatch.Client, error) {
	cli, err := etcdwatch.Connect(ctx, etcdwatch.ConnOptions{Endpoints: endpoints, CACert: pki.CertPath(pkiDir, layout.EtcdCAName),
		Cert: pki.CertPath(pkiDir, layout.APIServerEtcdClient), Key: pki.KeyPath(pkiDir, layout.APIServerEtcdClient),
		CommandTimeout: commandTimeout})
	var pathErr *fs.PathError
	if err != nil && ctx.Err() == nil && !errors.As(err, &pathErr) {
		return nil, fmt.Errorf("%w; %s", err, unavailableAdvice)
	}
	return cli, err
}

// request runs one member call (list, add, promote, remove) within
// the client's command timeout (etcdwatch.DefaultCommandTimeout, etcdctl's
// --command-timeout), on a member that has a leader: with quorum lost a
// membership change would otherwise wait for one forever. A timeout or
// "no leader" says so, and what to do.
func request(ctx context.Context, cli *etcdwatch.Client, what string, call func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), cli.CommandTimeout)
	defer cancel()
	err := call(rctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	eps := strings.Join(cli.Endpoint.Endpoints, ",")
	if errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("etcd %s: %s %s did not answer within %s: %s", what, eps, what, cli.CommandTimeout, unavailableAdvice)
	}
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		return fmt.Errorf("etcd %s: %s has no leader (%v): %s", what, eps, err, unavailableAdvice)
	}
	return fmt.Errorf("etcd %s: %w", what, err)
}

// Member is a member as the join reads it.
type Member struct {
	ID        uint64
	Name      string
	PeerURLs  []string
	IsLearner bool
	// Started says the member's etcd ran and published its name.
	Started bool
}

// Find is the member of members whose peer URL is peer, or nil.
func Find(members []*Member, peer string) *Member {
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peer) {
			return m
		}
	}
	return nil
}

// List is the cluster's member list.
func List(ctx context.Context, cli *etcdwatch.Client) ([]*Member, error) {
	var resp *clientv3.MemberListResponse
	err := request(ctx, cli, "member list", func(ctx context.Context) (err error) {
		resp, err = cli.MemberList(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return asMembers(resp.Members), nil
}

// asMembers are etcd's members as the join reads them.
func asMembers(pbs []*etcdserverpb.Member) []*Member {
	var out []*Member
	for _, m := range pbs {
		out = append(out, &Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner, Started: m.Name != ""})
	}
	return out
}

// AddLearner adds a learner member with peer URL peer (it does not count
// for quorum, so a member that never starts costs the cluster nothing)
// and returns the member list with it.
func AddLearner(ctx context.Context, cli *etcdwatch.Client, peer string) ([]*Member, error) {
	var resp *clientv3.MemberAddResponse
	err := request(ctx, cli, "member add (learner) "+peer, func(ctx context.Context) (err error) {
		resp, err = cli.MemberAddAsLearner(ctx, []string{peer})
		return err
	})
	if err != nil {
		return nil, err
	}
	return asMembers(resp.Members), nil
}

// Promote makes learner m a voting member; it fails while m has not
// caught up with the leader.
func Promote(ctx context.Context, cli *etcdwatch.Client, m *Member) error {
	return request(ctx, cli, "member promote", func(ctx context.Context) error {
		_, err := cli.MemberPromote(ctx, m.ID)
		return err
	})
}

// Remove removes the member with peer URL peer; it reports whether there
// was one (one removed meanwhile by another counts as removed).
func Remove(ctx context.Context, cli *etcdwatch.Client, peer string) (bool, error) {
	ms, err := List(ctx, cli)
	if err != nil {
		return false, err
	}
	m := Find(ms, peer)
	if m == nil {
		return false, nil
	}
	err = request(ctx, cli, "member remove "+peer, func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, m.ID)
		return err
	})
	if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) && !errors.Is(err, rpctypes.ErrGRPCMemberNotFound) {
		return false, err
	}
	return true, nil
}

// InitialCluster is etcd's --initial-cluster for a member joining
// members: every member by name (the new one, self, not started yet, by
// name) and peer URL.
func InitialCluster(members []*Member, self *Member, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self.ID {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// pollInterval is how often a joining member's wait asks etcd about it.
const pollInterval = 500 * time.Millisecond

// Ensure finds peer's member in the cluster, or adds it as a learner (it
// does not count for quorum, so a member that never starts costs the
// cluster nothing): the members, peer's, and whether it added it.
func Ensure(ctx context.Context, cli *etcdwatch.Client, peer string) (members []*Member, self *Member, added bool, err error) {
	ms, err := List(ctx, cli)
	if err != nil {
		return nil, nil, false, err
	}
	if self = Find(ms, peer); self != nil {
		return ms, self, false, nil
	}
	if ms, err = AddLearner(ctx, cli, peer); err != nil {
		return nil, nil, false, err
	}
	if self = Find(ms, peer); self == nil {
		return nil, nil, false, fmt.Errorf("etcd member add %s: the member list it returned lacks it", peer)
	}
	return ms, self, true, nil
}

// WaitVoting waits, at most timeout, until node's member at peer has
// started and is a voting member, promoting it once it has caught up
// with the leader; notStarted says why it waits while the member has
// not started.
func WaitVoting(ctx context.Context, cli *etcdwatch.Client, peer, node string, notStarted func() string, timeout time.Duration) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		ms, err := List(ctx, cli)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		m := Find(ms, peer)
		switch {
		case m == nil:
			return false, fmt.Errorf("etcd member %s was removed while it joined", peer)
		case !m.IsLearner && m.Started:
			return true, nil
		case !m.Started:
			why = notStarted()
			return false, nil
		}
		if err := Promote(ctx, cli, m); err != nil {
			why = "promote: " + err.Error() // not in sync with the leader yet
			return false, nil
		}
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("etcd member %s of node %s did not join within %s: %s", peer, node, timeout, why)
	}
	return err
}
