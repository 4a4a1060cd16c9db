// Package protocheck holds the test that the plugin contract's gate works:
// make check-proto runs buf lint and buf breaking against the released
// descriptor set (plugins/sdk/proto/backend/v1/backend.v0.binpb), and the
// test feeds buf breaking deliberate wire breaks of a copy of the proto.
package protocheck
