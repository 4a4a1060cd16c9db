package adminapi

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api"
	"github.com/guestlink/guestlink/core/auth"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/storage"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/plugins/pluginhost"
	"github.com/guestlink/guestlink/transport/httpwrap"
)

// request is a request as the admin API's handlers see it: the fiber
// context and the route's path parameters, parsed and validated.
type request = httpwrap.Request

// handler is an admin API route's handler: it returns the value answered in
// the sync envelope or an error answered in the error envelope
// (writeError maps its errdefs kind to the status).
type handler = httpwrap.Handler

// envelopes is the admin API's httpwrap.Encoder: values in LXD's sync
// envelope, errors through writeError (the same answer as every other
// error of the /1.0 routes: kinds mapped to statuses, no host path in a
// 5xx, a request id in the log).
type envelopes struct{ a *API }

// Value answers status with the sync envelope around v.
func (e envelopes) Value(c *fiber.Ctx, status int, v any) error {
	return c.Status(status).JSON(api.Sync(v))
}

// Error answers err in the error envelope.
func (e envelopes) Error(c *fiber.Ctx, err error) error {
	return writeError(c, err, e.a.cfg.BodyLimit, e.a.log)
}

var _ httpwrap.Encoder = envelopes{}

// ok returns the fiber handler of a route answered 200 with h's value;
// params are parsed (in order) before h runs.
func (a *API) ok(h handler, params ...httpwrap.Param) fiber.Handler {
	return httpwrap.Wrapper{Encoder: envelopes{a}}.OK(h, params...)
}

// created returns the fiber handler of a route that makes something,
// answered 201 with h's value.
func (a *API) created(h handler, params ...httpwrap.Param) fiber.Handler {
	return httpwrap.Wrapper{Encoder: envelopes{a}}.Created(h, params...)
}

// The path parameters of the admin API's routes: each is unescaped and
// validated here, once, before a handler runs. The messages are the API's
// (docs/admin-api.md); a validator's error keeps its own kind.
var (
	instanceNameParam   = escapedParam("name", "instance name", instance.ValidateName)
	snapshotNameParam   = escapedParam("snap", "snapshot name", instance.ValidateSnapshotName)
	deviceNameParam     = requiredParam("device", "device name", nil)
	poolParam           = requiredParam("pool", "pool", nil)
	volumeParam         = requiredParam("volume", "volume", storageName("volume"))
	volumeSnapshotParam = requiredParam("snapshot", "snapshot", storageName("snapshot"))
	imageRefParam       = escapedParam("fp", "fingerprint", nil)
	aliasParam          = escapedParam("alias", "alias", nil)
	certificateParam    = escapedParam("fingerprint", "fingerprint", nil)
	identityNameParam   = escapedParam("name", "identity name", auth.ValidateName)
	sessionIDParam      = escapedParam("id", "session id", nil)
	// restart names a running plugin: any plain file name.
	restartBackendParam = escapedParam("name", "backend name", func(name string) error {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			return badRequest("invalid backend name %q: must be a plugin file name", name)
		}
		return nil
	})
	// reload names an installed plugin: pluginhost's rules for its file.
	reloadBackendParam = escapedParam("name", "backend name", func(name string) error {
		if err := pluginhost.CheckName(name); err != nil {
			return badRequest("%v", err)
		}
		return nil
	})
	// A cluster member's name is taken as it stands in the path.
	memberParam = httpwrap.Param{Key: "name", Parse: func(raw string) (string, error) { return raw, nil }}
)

// escapedParam is the path parameter key, unescaped ("invalid WHAT %q: bad
// escape" when it cannot be) and then checked by check (nil: no check).
func escapedParam(key, what string, check func(string) error) httpwrap.Param {
	return httpwrap.Param{Key: key, Parse: func(raw string) (string, error) {
		v, err := url.PathUnescape(raw)
		if err != nil {
			return "", badRequest("invalid %s %q: bad escape", what, raw)
		}
		return v, runCheck(check, v)
	}}
}

// requiredParam is the path parameter key, unescaped and not empty
// ("invalid WHAT %q" otherwise), then checked by check (nil: no check).
func requiredParam(key, what string, check func(string) error) httpwrap.Param {
	return httpwrap.Param{Key: key, Parse: func(raw string) (string, error) {
		v, err := url.PathUnescape(raw)
		if err != nil || v == "" {
			return "", badRequest("invalid %s %q", what, raw)
		}
		return v, runCheck(check, v)
	}}
}

func runCheck(check func(string) error, v string) error {
	if check == nil {
		return nil
	}
	return check(v)
}

// storageName checks a volume's or a snapshot's name (storage.ValidateName).
func storageName(what string) func(string) error {
	return func(v string) error { return storage.ValidateName(what, v) }
}

// wired returns the result of a handler that ends with a service call
// returning (v, err): wire(v) answered, or err. Use it as
// wired(WireVolume)(st.Volume(ctx, pool, name)).
func wired[T, W any](wire func(T) W) func(T, error) (any, error) {
	return func(v T, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return wire(v), nil
	}
}

// wiredEach is wired for a service call returning a list: each element
// converted by wire, an empty list answered [] (never null).
func wiredEach[T, W any](wire func(T) W) func([]T, error) (any, error) {
	return func(list []T, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		out := make([]W, 0, len(list))
		for _, v := range list {
			out = append(out, wire(v))
		}
		return out, nil
	}
}

// optional returns svc as the optional service S it may implement, or an
// error of kind errdefs.ErrNotSupported (501) saying what the daemon
// cannot do.
func optional[S any](svc any, cannot string) (S, error) {
	s, ok := svc.(S)
	if !ok {
		return s, fmt.Errorf("%s: %w", cannot, errdefs.ErrNotSupported)
	}
	return s, nil
}

// withBody returns the handler of a route that takes a JSON body: the
// body is decoded into a new T (decodeBody: JSON only, no unknown field,
// valid UTF-8) and handed to h with the service s.
func withBody[S, T any](h func(r *request, s S, body *T) (any, error)) func(*request, S) (any, error) {
	return func(r *request, s S) (any, error) {
		body := new(T)
		if err := decodeBody(r.Ctx, body); err != nil {
			return nil, err
		}
		return h(r, s, body)
	}
}

// decoded is withBody for a route that needs no optional service.
func decoded[T any](h func(r *request, body *T) (any, error)) handler {
	return func(r *request) (any, error) {
		body := new(T)
		if err := decodeBody(r.Ctx, body); err != nil {
			return nil, err
		}
		return h(r, body)
	}
}

// nameParam returns the :name path parameter of an instance route,
// unescaped and validated, for the routes that answer without the wrapper
// (streams).
func nameParam(c *fiber.Ctx) (string, error) {
	return instanceNameParam.Parse(c.Params("name"))
}
