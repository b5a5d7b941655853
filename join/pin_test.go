package join

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// testdata/ca.crt's pin as kubeadm's docs compute it with openssl:
// openssl x509 -pubkey -noout -in ca.crt | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex
const testdataPin = "sha256:b1a155cb3b077fc7eec100ab5c9e7a1f64949912cb1560bb8c034c8c62ab2068"

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// newCA is a self-signed CA with a new key, and the key.
func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return caWithKey(t, key), key
}

func caWithKey(t *testing.T, key *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "kubernetes"}, key)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestCAPinIsOpenSSLs(t *testing.T) {
	if got := CAPin(readCert(t, "testdata/ca.crt")); got != testdataPin {
		t.Fatalf("CAPin = %s, openssl says %s", got, testdataPin)
	}
}

func TestPinFollowsTheKey(t *testing.T) {
	ca, key := newCA(t)
	renewed := caWithKey(t, key)
	if string(renewed.Raw) == string(ca.Raw) {
		t.Fatal("the renewed CA is the same certificate; the test proves nothing")
	}
	if PinOf(renewed) != PinOf(ca) {
		t.Errorf("a CA renewed with the same key has another pin: %s, was %s", PinOf(renewed), PinOf(ca))
	}
	other, _ := newCA(t)
	if PinOf(other) == PinOf(ca) {
		t.Errorf("two keys have the same pin %s", PinOf(ca))
	}
}

func TestParsePin(t *testing.T) {
	hexDigits := strings.TrimPrefix(testdataPin, "sha256:")
	for _, tc := range []struct {
		name, in string
		wantErr  string // "" = valid
	}{
		{"kubeadm's form", testdataPin, ""},
		{"upper case", "SHA256:" + strings.ToUpper(hexDigits), ""},
		{"no prefix", hexDigits, "no format prefix"},
		{"other format", "md5:" + hexDigits[:32], `unknown hash format "md5"`},
		{"short", "sha256:" + hexDigits[:63], "63 hex digits"},
		{"long", "sha256:" + hexDigits + "00", "66 hex digits"},
		{"not hex", "sha256:" + strings.Repeat("zz", 32), "not hex"},
		{"a second colon", "sha256:" + hexDigits[:31] + ":" + hexDigits[32:], "not hex"},
		{"empty", "", "no format prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePin(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.String() != testdataPin {
					t.Fatalf("ParsePin(%q) = %s, want %s", tc.in, p, testdataPin)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParsePin(%q) = %v, want ErrBadPin saying %q", tc.in, err, tc.wantErr)
			}
		})
	}
	if _, err := ParsePins([]string{testdataPin, "sha256:xx"}); !errors.Is(err, ErrBadPin) {
		t.Errorf("ParsePins with a bad second pin: %v", err)
	}
}

func TestCheckPins(t *testing.T) {
	ca, _ := newCA(t)
	next, _ := newCA(t)
	other, _ := newCA(t)
	for _, tc := range []struct {
		name  string
		certs []*x509.Certificate
		pins  []Pin
		ok    bool
	}{
		{"the CA pinned", []*x509.Certificate{ca}, []Pin{PinOf(ca)}, true},
		{"one of several pins", []*x509.Certificate{ca}, []Pin{PinOf(other), PinOf(ca)}, true},
		{"a bundle during CA rotation, the new one pinned", []*x509.Certificate{ca, next}, []Pin{PinOf(next)}, true},
		{"another CA pinned", []*x509.Certificate{ca}, []Pin{PinOf(other)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPins(tc.certs, tc.pins)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrPinMismatch) || !strings.Contains(err.Error(), PinOf(ca).String()) {
				t.Fatalf("CheckPins = %v, want ErrPinMismatch naming the hash found, %s", err, PinOf(ca))
			}
		})
	}
	if err := CheckPins([]*x509.Certificate{ca}, nil); err == nil || !strings.Contains(err.Error(), "no CA hash") {
		t.Errorf("no pins: %v, want a refusal", err)
	}
}

func TestParseToken(t *testing.T) {
	tok, err := ParseToken("abcdef.0123456789abcdef\n")
	if err != nil || tok.ID != "abcdef" || tok.Secret != "0123456789abcdef" || tok.String() != "abcdef.0123456789abcdef" {
		t.Fatalf("ParseToken = %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef:0123456789abcdef", "abcdef.0123456789abcdef.x"} {
		_, err := ParseToken(bad)
		if !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrBadToken", bad, err)
		} else if len(bad) > 7 && strings.Contains(err.Error(), bad[7:]) {
			t.Errorf("ParseToken(%q)'s error repeats the secret: %v", bad, err)
		}
	}
}
