package source

import "testing"

func TestStringConst(t *testing.T) {
	tests := []struct {
		name, src, want string
		ok              bool
	}{
		{"in a const block, as kubeadm writes it", "package constants\n\nconst (\n\t// DefaultEtcdVersion indicates the default etcd version that kubeadm uses\n\tDefaultEtcdVersion = \"3.6.5-0\"\n)\n", "3.6.5-0", true},
		{"a lone const, raw string", "package c\nconst DefaultEtcdVersion = `3.6.5-0`\n", "3.6.5-0", true},
		{"several names in one spec", "package c\nconst A, DefaultEtcdVersion = \"x\", \"3.5.21-0\"\n", "3.5.21-0", true},
		{"named in a comment only", "package c\n// DefaultEtcdVersion = \"3.6.5-0\"\nconst X = 1\n", "", false},
		{"a var is not a const", "package c\nvar DefaultEtcdVersion = \"3.6.5-0\"\n", "", false},
		{"not a string", "package c\nconst DefaultEtcdVersion = 3\n", "", false},
		{"not Go", "DefaultEtcdVersion = \"3.6.5-0\"", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := stringConst([]byte(tc.src), "DefaultEtcdVersion")
			if got != tc.want || ok != tc.ok {
				t.Fatalf("stringConst = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
