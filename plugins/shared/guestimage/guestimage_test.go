package guestimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

// members lists an archive's names and modes with cpio.Reader.
func members(t *testing.T, b []byte) map[string]cpio.FileMode {
	t.Helper()
	r := cpio.NewReader(bytes.NewReader(b))
	out := map[string]cpio.FileMode{}
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		out[h.Name] = h.Mode
	}
}

func TestWriteConfigArchive(t *testing.T) {
	var buf bytes.Buffer
	err := WriteConfigArchive(&buf, []ConfigFile{
		{Path: "agent.key", Mode: 0o600, Data: []byte("secret")},
		{Path: "sub/dir/x.conf", Mode: 0o644, Data: []byte("x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := members(t, buf.Bytes())
	want := map[string]cpio.FileMode{
		"config":                cpio.TypeDir | 0o700,
		"config/agent.key":      cpio.TypeReg | 0o600,
		"config/sub":            cpio.TypeDir | 0o700,
		"config/sub/dir":        cpio.TypeDir | 0o700,
		"config/sub/dir/x.conf": cpio.TypeReg | 0o644,
	}
	for name, mode := range want {
		if m[name] != mode {
			t.Errorf("%s: mode %o, want %o", name, m[name], mode)
		}
	}
	if len(m) != len(want) {
		t.Errorf("members = %v", m)
	}
}

func TestWriteConfigArchiveRejects(t *testing.T) {
	for _, p := range []string{"", "/etc/passwd", "../x", "a/../../x", ".", "a\x00b"} {
		t.Run(strconv.Quote(p), func(t *testing.T) {
			err := WriteConfigArchive(io.Discard, []ConfigFile{{Path: p, Mode: 0o600}})
			if err == nil {
				t.Fatalf("path %q accepted", p)
			}
		})
	}
	if err := WriteConfigArchive(io.Discard, []ConfigFile{{Path: "x", Mode: 0o4755}}); err == nil {
		t.Fatal("setuid mode accepted")
	}
}

func TestArchiveDeviceNodes(t *testing.T) {
	var buf bytes.Buffer
	err := writeArchive(&buf, []entry{
		{name: "bin/busybox", mode: cpio.TypeReg | 0o755, data: []byte("bb")},
		{name: "dev/console", mode: cpio.TypeChar | 0o600, rdev: [2]int{5, 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := members(t, buf.Bytes())
	for _, name := range []string{"dev", "dev/console", "bin", "bin/busybox"} {
		if _, ok := m[name]; !ok {
			t.Errorf("archive lacks %s (parents must be added): %v", name, m)
		}
	}
	// The newc header of dev/console carries rdev 5:1 (fields 11 and 12).
	i := bytes.Index(buf.Bytes(), []byte("dev/console\x00"))
	if i < 110 {
		t.Fatalf("dev/console header not found")
	}
	hdr := string(buf.Bytes()[i-110 : i])
	if !strings.HasPrefix(hdr, "070701") || hdr[78:86] != "00000005" || hdr[86:94] != "00000001" {
		t.Fatalf("dev/console header %q lacks rdev 5:1", hdr)
	}
}

// TestDecompressLZ4Legacy decompresses a legacy LZ4 frame (the format of
// the kernel's LZ4 payload), made with `lz4 -l -9` from 4 bytes of ELF
// magic and 2,000 numbered lines.
func TestDecompressLZ4Legacy(t *testing.T) {
	frame, err := os.ReadFile("testdata/legacy.lz4")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	want.WriteString("\x7fELF")
	for i := range 2000 {
		fmt.Fprintf(&want, "line %d of a test kernel\n", i)
	}
	got, err := decompressLZ4(context.Background(), frame, uint32(want.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("decompressed %d bytes, want %d (contents differ: %v)", len(got), want.Len(), len(got) == want.Len())
	}
	if _, err := decompressLZ4(context.Background(), frame[:len(frame)/2], uint32(want.Len())); err == nil {
		t.Fatal("a truncated frame decompressed without error")
	}
}
