package loadbalancer

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	real, err := os.ReadFile("testdata/show-stat-2.6.csv") // `show stat` of haproxy 2.6.12, both servers refusing
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		input string
		want  []Stat
	}{
		{"haproxy 2.6", string(real), []Stat{
			{Proxy: "apiserver", Server: "FRONTEND", Status: "OPEN"},
			{Proxy: "apiservers", Server: "n1", Status: "DOWN", CheckStatus: "L4CON"},
			{Proxy: "apiservers", Server: "n2", Status: "DOWN", CheckStatus: "L4CON"},
			{Proxy: "apiservers", Server: "BACKEND", Status: "DOWN"},
		}},
		{"columns found by name", "# svname,pxname,stot,new_column,scur,check_status,status,\n" +
			"n1,apiservers,17,x,3,L7OK,DRAIN,\n" +
			"n2,apiservers,40,y,0,L7STS,UP 1/2,\n\n", []Stat{
			{Proxy: "apiservers", Server: "n1", Sessions: 3, Total: 17, Status: "DRAIN", CheckStatus: "L7OK"},
			{Proxy: "apiservers", Server: "n2", Sessions: 0, Total: 40, Status: "UP 1/2", CheckStatus: "L7STS"},
		}},
		{"header only", "# pxname,svname,scur,stot,status,check_status\n\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseStat =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestParseStatRefuses(t *testing.T) {
	for _, tc := range []struct{ name, input, want string }{
		{"no header", "apiservers,n1,0\n", `not the "# pxname,…" header`},
		{"an error message", "Unknown command.\n", "not the"},
		{"missing column", "# pxname,svname,scur,status,check_status\n", "no stot column"},
		{"short line", "# pxname,svname,scur,stot,status,check_status\napiservers,n1,0\n", "wrong number of fields"},
		{"not a number", "# pxname,svname,scur,stot,status,check_status\napiservers,n1,many,0,UP,L7OK\n", `scur "many" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStat([]byte(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseStat = %v; want an error with %q", err, tc.want)
			}
		})
	}
}

func TestKeptState(t *testing.T) {
	// `show servers state` of haproxy 2.6.12: n1 drained, n2 down.
	const state = "1\n" +
		"# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n" +
		"3 apiservers 1 n1 127.0.0.1 0 8 1 1 0 8 2 0 6 0 0 0 - 16444 - 0 0 - - 0\n" +
		"3 apiservers 2 n2 127.0.0.1 0 0 1 1 6 8 2 0 6 0 0 0 - 16445 - 0 0 - - 0\n" +
		"3 apiservers 3 n3 127.0.0.1 2 0 1 1 6 8 2 0 6 0 0 0 - 16446 - 0 0 - - 0\n\n"
	c := Config{Backends: []Backend{
		{Name: "n1", Address: "127.0.0.1:16444"}, // kept
		{Name: "n2", Address: "127.0.0.1:17000"}, // moved: from the config
		{Name: "n4", Address: "127.0.0.1:16446"}, // new (n3 is gone)
	}}
	got, err := keptState(state, c)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(state, "\n")
	if want := strings.Join(lines[:3], "\n") + "\n"; got != want {
		t.Errorf("keptState =\n%s\nwant\n%s", got, want)
	}
	if _, err := keptState("Unknown command.\n", c); err == nil || !strings.Contains(err.Error(), "not the version 1 format") {
		t.Errorf("keptState of an error message = %v", err)
	}
}
