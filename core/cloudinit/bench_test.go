package cloudinit

import "testing"

// BenchmarkValue measures the merge of SSH keys into a cloud-config.
func BenchmarkValue(b *testing.B) {
	cfg := map[string]string{
		KeyUserData:             "#cloud-config\npackages: [curl, jq]\nruncmd:\n  - echo hi\nusers:\n  - default\n",
		"cloud-init.ssh-keys.a": "root:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample a@b",
		"cloud-init.ssh-keys.b": "ubuntu:gh:octocat",
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if Value(cfg, KeyUserData) == "" {
			b.Fatal("empty")
		}
	}
}
