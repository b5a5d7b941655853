package certshare

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestNewCertificateKey(t *testing.T) {
	a, err := NewCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 64 || strings.ToLower(a) != a {
		t.Errorf("key %q: want 64 lowercase hex digits, as kubeadm prints it", a)
	}
	if a == b {
		t.Error("two new keys are the same")
	}
	if _, err := ParseCertificateKey(a); err != nil {
		t.Errorf("a new key does not parse: %v", err)
	}
}

func TestParseCertificateKey(t *testing.T) {
	const good = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	want := Key{}
	for i := range want {
		want[i] = byte(i)
	}
	for _, tc := range []struct {
		name, in string
		wantMsg  string // "" = valid
	}{
		{name: "lowercase", in: good},
		{name: "uppercase, as hex.DecodeString takes it", in: strings.ToUpper(good)},
		{name: "a file's newline", in: good + "\n"},
		{name: "16 bytes (AES-128, which kubeadm's validation refuses)", in: good[:32], wantMsg: "32 characters; want 64 hex digits"},
		{name: "one digit too many", in: good + "0", wantMsg: "65 characters"},
		{name: "empty", in: "", wantMsg: "0 characters"},
		{name: "not hex", in: strings.Repeat("zq", 32), wantMsg: "not hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCertificateKey(tc.in)
			if tc.wantMsg == "" {
				if err != nil || got != want {
					t.Fatalf("= %x, %v; want %x", got, err, want)
				}
				return
			}
			if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %v: want ErrBadKey saying %q", err, tc.wantMsg)
			}
			if tc.in != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.in)) {
				t.Errorf("error %q repeats the key", err)
			}
		})
	}
}

// TestFormat pins the value format to AES-256-GCM with the 12-byte nonce
// first and no additional data, kubeadm's util/crypto construction, by a
// published vector (McGrew and Viega's GCM test vectors, as Go's own
// crypto/cipher tests carry them: key=32, plaintext=16): what seal makes
// from a fixed key and nonce, and what decrypt reads, cannot drift.
func TestFormat(t *testing.T) {
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var key Key
	copy(key[:], unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"))
	nonce := unhex("54cc7dc2c37ec006bcc6d1da")
	plaintext := unhex("007c5e5b3e59df24a7c355584fc1518d")
	// nonce ‖ ciphertext ‖ tag
	value := unhex("54cc7dc2c37ec006bcc6d1da" + "d50b9e252b70945d4240d351677eb10f" + "937cdaef6f2822b6a3191654ba41b197")

	got, err := seal(key, plaintext, bytes.NewReader(nonce))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, value) {
		t.Errorf("seal = %x\nwant   %x", got, value)
	}
	out, err := decrypt(key, value)
	if err != nil || !bytes.Equal(out, plaintext) {
		t.Errorf("decrypt = %x, %v; want %x", out, err, plaintext)
	}
}

func TestDecryptFailures(t *testing.T) {
	var key, other Key
	other[0] = 1
	value, err := encrypt(key, []byte("-----BEGIN CERTIFICATE-----\n"))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		v := bytes.Clone(value)
		v[i] ^= 1
		return v
	}
	for _, tc := range []struct {
		name  string
		key   Key
		value []byte
		want  error
	}{
		{"another key", other, value, ErrWrongKey},
		{"a bit of the nonce flipped", key, flip(0), ErrWrongKey},
		{"a bit of the ciphertext flipped", key, flip(12), ErrWrongKey},
		{"a bit of the tag flipped", key, flip(len(value) - 1), ErrWrongKey},
		{"truncated to the nonce and half the tag", key, value[:12+8], errTruncated},
		{"empty", key, nil, errTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := decrypt(tc.key, tc.value)
			if !errors.Is(err, tc.want) || out != nil {
				t.Fatalf("decrypt = %q, %v; want %v", out, err, tc.want)
			}
		})
	}
	if !strings.Contains(ErrWrongKey.Error(), "certificate key does not match") {
		t.Errorf("ErrWrongKey says %q", ErrWrongKey)
	}
	if v2, _ := encrypt(key, []byte("-----BEGIN CERTIFICATE-----\n")); bytes.Equal(v2, value) {
		t.Error("two encryptions of the same bytes are equal: the nonce is not random")
	}
}

// FuzzDecrypt: a value from the API server is untrusted input. Whatever
// it holds, decrypt fails cleanly or returns what seal was given; and
// anything sealed opens to itself.
func FuzzDecrypt(f *testing.F) {
	var key Key
	// A fixed nonce: every fuzzing worker process runs this setup, and
	// each must make the same sealed value the seed corpus holds.
	sealed, err := seal(key, []byte("-----BEGIN PUBLIC KEY-----\n"), bytes.NewReader(make([]byte, 12)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed, []byte("x"))
	f.Add([]byte{}, []byte{})
	f.Add(sealed[:12], []byte("-----BEGIN EC PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, value, plaintext []byte) {
		if out, err := decrypt(key, value); err == nil && !bytes.Equal(value, sealed) {
			t.Fatalf("decrypt accepted a value seal did not make: %x → %q", value, out)
		}
		v, err := encrypt(key, plaintext)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := decrypt(key, v); err != nil || !bytes.Equal(out, plaintext) {
			t.Fatalf("round trip of %q: %q, %v", plaintext, out, err)
		}
	})
}
