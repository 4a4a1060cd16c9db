package bootstate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	want := State{BootID: "b1", Declared: "Ready", Advertisement: json.RawMessage(`{"cid":2}`)}
	if err := Save(dir, want); err != nil {
		t.Fatalf("Save: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode = %v (%v), want 0600", fi.Mode(), err)
	}
	tests := []struct {
		name     string
		boot     string
		declared string
	}{
		{"same boot", "b1", "Ready"},
		{"other boot", "b2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(dir, tt.boot)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.BootID != tt.boot || got.Declared != tt.declared {
				t.Fatalf("Load = %+v, want boot %s declared %q", got, tt.boot, tt.declared)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		got, err := Load(t.TempDir(), "b1")
		if err != nil || got.Declared != "" {
			t.Fatalf("Load missing = (%+v, %v)", got, err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		d := t.TempDir()
		_ = os.WriteFile(filepath.Join(d, FileName), []byte("{"), 0o600)
		got, err := Load(d, "b1")
		if err == nil || got.BootID != "b1" || got.Declared != "" {
			t.Fatalf("Load corrupt = (%+v, %v), want empty state and an error", got, err)
		}
	})
}

func TestBootID(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "proc/sys/kernel/random")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "boot_id"), []byte("sim-boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := BootID(root); err != nil || id != "sim-boot-1" {
		t.Fatalf("BootID = (%q, %v), want sim-boot-1", id, err)
	}
}
