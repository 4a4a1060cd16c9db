package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/guestlink/guestlink/api"
)

// ClusterMembers lists the members of the daemon's cluster.
func (c *Client) ClusterMembers(ctx context.Context) ([]api.ClusterMember, error) {
	var out []api.ClusterMember
	if err := c.do(ctx, http.MethodGet, "/1.0/cluster/members", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AddClusterMember issues a one-time join token for a new member.
func (c *Client) AddClusterMember(ctx context.Context, name string) (*api.ClusterJoinToken, error) {
	var out api.ClusterJoinToken
	if err := c.do(ctx, http.MethodPost, "/1.0/cluster/members", nil, api.ClusterMembersPost{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveClusterMember removes a member; force removes it even though it
// owns instances. It returns the instances still recorded at the member.
func (c *Client) RemoveClusterMember(ctx context.Context, name string, force bool) (*api.ClusterMemberRemoved, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"1"}}
	}
	var out api.ClusterMemberRemoved
	if err := c.do(ctx, http.MethodDelete, "/1.0/cluster/members/"+url.PathEscape(name), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
