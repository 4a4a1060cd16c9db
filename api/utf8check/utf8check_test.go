package utf8check

import "testing"

// TestJSONOffset tries valid text (ASCII, multi-byte, surrogate pairs,
// escaped backslashes) and each way of sending text that is not UTF-8: a
// stray byte, a truncated sequence, an overlong form, an encoded
// surrogate, and lone surrogate escapes.
func TestJSONOffset(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int
	}{
		{"ascii", `{"a":"b"}`, -1},
		{"multi-byte", `{"user.name":"café 日本 🚀"}`, -1},
		{"escaped pair", `{"a":"\ud83d\ude80"}`, -1},
		{"escaped BMP", `{"a":"\u00e9\uFFFD"}`, -1},
		{"escaped backslash then u", `{"a":"\\ud800"}`, -1},
		{"stray byte", "{\"a\":\"b\xffc\"}", 7},
		{"truncated sequence", "{\"a\":\"\xe6\x97\"}", 6},
		{"overlong slash", "{\"a\":\"\xc0\xaf\"}", 6},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", 6},
		{"lone high escape", `{"a":"x\ud800"}`, 7},
		{"lone low escape", `{"a":"\udc00"}`, 6},
		{"high then BMP escape", `{"a":"\ud800\u0041"}`, 6},
		{"high at the end", `{"a":"\uD800`, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := JSONOffset([]byte(tc.in)); got != tc.want {
				t.Errorf("JSONOffset(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
	if err := Body([]byte("{\"a\":\"\xff\"}")); err == nil || err.Error() != "request body is not valid UTF-8 (byte offset 6)" {
		t.Errorf("Body: %v", err)
	}
	if err := Value("ok \xfe"); err == nil || err.Error() != "not valid UTF-8 (byte offset 3)" {
		t.Errorf("Value: %v", err)
	}
	if err := Value("日本"); err != nil {
		t.Errorf("Value of valid text: %v", err)
	}
}
