package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

// The two keys each change touches: a pod's label and a service's port.
const (
	changedPodKey     = "/registry/pods/ns-0/obj-00000"
	changedServiceKey = "/registry/services/specs/ns-1/obj-00001"
)

// changeTwoKeys writes both keys in one transaction; round makes each
// change differ from the last.
func changeTwoKeys(ctx context.Context, cli *clientv3.Client, round int) error {
	pod := etcdtest.Pod("ns-0", "obj-00000", 0)
	pod.Labels["round"] = strconv.Itoa(round)
	svc := etcdtest.Service("ns-1", "obj-00001", 1)
	svc.Spec.Ports[0].Port = int32(1000 + round)
	_, err := cli.Txn(ctx).Then(
		clientv3.OpPut(changedPodKey, string(etcdtest.MustEncode(pod))),
		clientv3.OpPut(changedServiceKey, string(etcdtest.MustEncode(svc))),
	).Commit()
	return err
}

// changeAt is -change: the command `devk etcd diff` runs in the CLI
// measures.
func changeAt(endpoint string, round int) error {
	cli, err := newClient(endpoint)
	if err != nil {
		return err
	}
	defer cli.Close()
	return changeTwoKeys(context.Background(), cli, round)
}

// checkTwoKeys fails unless a diff's output shows exactly the change.
func checkTwoKeys(out string) error {
	if !strings.Contains(out, "# 2 keys changed") || !strings.Contains(out, "MODIFIED pods ns-0/obj-00000") || !strings.Contains(out, "MODIFIED services ns-1/obj-00001") {
		return fmt.Errorf("devk etcd diff found something else than the 2 changed keys:\n%s", out)
	}
	return nil
}
