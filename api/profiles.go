package api

// ProfilePut is the writable part of a profile: the body of PUT
// /1.0/profiles/{name} (all of it replaced) and of PATCH (config keys and
// devices merged into the profile's; "" unsets a key).
type ProfilePut struct {
	Description string                       `json:"description" yaml:"description"`
	Config      map[string]string            `json:"config" yaml:"config"`
	Devices     map[string]map[string]string `json:"devices" yaml:"devices"`
}

// Profile is a profile as GET /1.0/profiles/{name} returns it (as LXD's):
// config keys and devices applied to the instances that name it, in their
// order, under their own keys.
type Profile struct {
	Name       string `json:"name" yaml:"name"`
	ProfilePut `yaml:",inline"`
	// UsedBy lists the instances that apply the profile, as URLs
	// (/1.0/instances/NAME).
	UsedBy []string `json:"used_by" yaml:"used_by"`
}

// ProfilesPost is the body of POST /1.0/profiles.
type ProfilesPost struct {
	Name       string `json:"name" yaml:"name"`
	ProfilePut `yaml:",inline"`
}

// ProfilePost is the body of POST /1.0/profiles/{name}: a rename.
type ProfilePost struct {
	Name string `json:"name"`
}

// DefaultProfile is the profile new instances get when they name none.
const DefaultProfile = "default"
