package advert

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/guestlink/guestlink/internal/testcert"
)

func testCert(t testing.TB) string {
	t.Helper()
	return string(testcert.New(t, "daemon").CertPEM)
}

func TestRoundTrip(t *testing.T) {
	a := &Advertisement{CID: 2, Port: 4242, Certificate: testCert(t), Devlxd: true}
	got, err := Parse(a.Marshal())
	if err != nil {
		t.Fatalf("Parse(Marshal()) = %v", err)
	}
	if !got.Equal(a) {
		t.Fatalf("round trip = %+v, want %+v", got, a)
	}
	if !strings.HasPrefix(string(a.Marshal()), `{"cid":2,"port":4242,"certificate":"-----BEGIN CERTIFICATE-----\n`) {
		t.Fatalf("Marshal() = %s", a.Marshal())
	}
}

func TestParseRejects(t *testing.T) {
	cert := testCert(t)
	q := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", `\n`), `"`, `\"`) }
	keyPEM := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
	tests := []struct {
		name string
		body string
	}{
		{"empty", ""},
		{"not json", "cid=2"},
		{"array", "[]"},
		{"unknown field", fmt.Sprintf(`{"cid":2,"port":1,"certificate":"%s","devlxd":true,"extra":1}`, q(cert))},
		{"port zero", fmt.Sprintf(`{"cid":2,"port":0,"certificate":"%s","devlxd":true}`, q(cert))},
		{"port too big", fmt.Sprintf(`{"cid":2,"port":65536,"certificate":"%s","devlxd":true}`, q(cert))},
		{"port negative", fmt.Sprintf(`{"cid":2,"port":-1,"certificate":"%s","devlxd":true}`, q(cert))},
		{"missing cert", `{"cid":2,"port":1,"devlxd":true}`},
		{"cert not pem", `{"cid":2,"port":1,"certificate":"hello","devlxd":true}`},
		{"cert wrong block", fmt.Sprintf(`{"cid":2,"port":1,"certificate":"%s","devlxd":true}`, q(keyPEM))},
		{"cert garbage der", `{"cid":2,"port":1,"certificate":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n","devlxd":true}`},
		{"two certs", fmt.Sprintf(`{"cid":2,"port":1,"certificate":"%s","devlxd":true}`, q(cert+cert))},
		{"trailing data", fmt.Sprintf(`{"cid":2,"port":1,"certificate":"%s","devlxd":true} {}`, q(cert))},
		{"devlxd string", fmt.Sprintf(`{"cid":2,"port":1,"certificate":"%s","devlxd":"yes"}`, q(cert))},
		{"too big", `{"cid":2,"port":1,"certificate":"` + strings.Repeat("A", MaxSize) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Parse([]byte(tt.body))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = (%+v, %v), want ErrInvalid", a, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	cert := testCert(f)
	f.Add((&Advertisement{CID: 2, Port: 1024, Certificate: cert, Devlxd: true}).Marshal())
	f.Add([]byte(`{"cid":2,"port":70000,"certificate":"x","devlxd":false}`))
	f.Add([]byte(`{"port":1,"certificate":"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if a.Port < 1 || a.Port > 65535 {
			t.Fatalf("accepted port %d", a.Port)
		}
		again, err := Parse(a.Marshal())
		if err != nil || !again.Equal(a) {
			t.Fatalf("re-parse of accepted %+v = (%+v, %v)", a, again, err)
		}
	})
}
