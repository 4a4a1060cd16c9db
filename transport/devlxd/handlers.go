package devlxd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/guestlink/guestlink/api/utf8check"
	"github.com/guestlink/guestlink/core/cloudinit"
	"github.com/guestlink/guestlink/core/events"
	"github.com/guestlink/guestlink/core/guestview"
	"github.com/guestlink/guestlink/core/instance"
	"github.com/guestlink/guestlink/core/linkhost"
	"github.com/guestlink/guestlink/core/pki"
	"github.com/guestlink/guestlink/errdefs"
	"github.com/guestlink/guestlink/link/devlxdapi"
)

const localsInstance = "devlxd.instance"
const localsIdentity = "devlxd.identity"

// authenticate resolves the calling instance from the connection's link
// identity and checks its client certificate. Whether the instance has
// devlxd enabled is checked per route (dispatch), after the method, as LXD.
func (s *Server) authenticate(c *fiber.Ctx) error {
	id, ok := linkhost.IdentityOf(c.Context().Conn())
	if !ok || id.InstanceUUID == "" {
		return sendError(c, http.StatusUnauthorized, "")
	}
	st := c.Context().TLSConnectionState()
	if st == nil || len(st.PeerCertificates) == 0 {
		return sendError(c, http.StatusUnauthorized, "")
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	inst, err := s.cfg.Instances.GetByUUID(ctx, id.InstanceUUID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return sendError(c, http.StatusUnauthorized, "")
	}
	if err != nil {
		s.cfg.Logger.Error("devlxd: looking up instance", "uuid", id.InstanceUUID, "err", err)
		return sendError(c, http.StatusInternalServerError, "")
	}
	want, err := s.cfg.Certs.AgentCertDER(inst.Name)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			s.cfg.Logger.Error("devlxd: loading agent certificate", "instance", inst.Name, "err", err)
		}
		return sendError(c, http.StatusUnauthorized, "")
	}
	peer := st.PeerCertificates[0]
	if !bytes.Equal(peer.Raw, want) || !pki.ValidAt(peer, s.cfg.Now()) {
		return sendError(c, http.StatusUnauthorized, "")
	}
	c.Locals(localsInstance, inst)
	c.Locals(localsIdentity, id)
	c.Set(devlxdapi.HeaderInstanceType, s.cfg.InstanceTypes.InstanceType(inst.Backend))
	if !s.bearer(c, inst) {
		return nil
	}
	return c.Next()
}

// isVM reports whether the calling guest is a virtual machine: it gets the
// answers of LXD's VM agent (lxd-agent) where they differ from the
// container server's (docs/devlxd.md).
func (s *Server) isVM(c *fiber.Ctx) bool {
	return s.cfg.InstanceTypes.InstanceType(callerOf(c).Backend) != devlxdapi.InstanceTypeContainer
}

// notImplemented answers a method the route does not serve: 501 with the
// status text (LXD's server), or with an empty text to a VM (LXD's agent
// writes none: the guest reads a bare newline).
func (s *Server) notImplemented(c *fiber.Ctx) error {
	if s.isVM(c) {
		return sendErrorText(c, http.StatusNotImplemented, "")
	}
	return sendError(c, http.StatusNotImplemented, "")
}

func callerOf(c *fiber.Ctx) *instance.Instance {
	return c.Locals(localsInstance).(*instance.Instance)
}

func (s *Server) getRoot(c *fiber.Ctx) error {
	return sendSync(c, []string{"/" + devlxdapi.APIVersion})
}

func (s *Server) getInfo(c *fiber.Ctx) error {
	inst := callerOf(c)
	info := devlxdapi.NewInfo(inst.Ready(), s.cfg.Location, s.cfg.InstanceTypes.InstanceType(inst.Backend))
	manages := isTrue(inst.Config[KeyManagementVolumes])
	if manages {
		info.SupportedStorageDrivers = s.storageDrivers()
	}
	if trustedOf(c) == nil {
		// The untrusted answer is one of eight envelopes (ready or not, VM
		// or container, managing volumes or not; the location and the
		// drivers are the server's), encoded once each.
		if b := s.untrustedInfo(info, manages); b != nil {
			return sendEnvelope(c, b)
		}
	}
	return sendSync(c, s.info(c, info))
}

// storageDrivers are the drivers of the host's storage pools, as LXD lists
// them in GET /1.0 to a guest that may manage volumes (empty without
// storage).
func (s *Server) storageDrivers() []devlxdapi.StorageDriver {
	out := []devlxdapi.StorageDriver{}
	if s.cfg.Storage == nil {
		return out
	}
	for _, p := range s.cfg.Storage.Pools() {
		d := devlxdapi.StorageDriver{Name: p.Driver, Remote: false} // dir: the host's own disk
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// untrustedInfo returns the success envelope of info, an untrusted GET /1.0
// answer, encoding it the first time it is asked for; nil if encoding fails.
func (s *Server) untrustedInfo(info devlxdapi.Info, manages bool) []byte {
	i := 0
	if info.State == devlxdapi.StateReady {
		i |= 1
	}
	if info.InstanceType == devlxdapi.InstanceTypeContainer {
		i |= 2
	}
	if manages {
		i |= 4
	}
	slot := &s.infoBodies[i]
	if b := slot.Load(); b != nil {
		return *b
	}
	b, err := devlxdapi.SyncResponse(info)
	if err != nil {
		return nil
	}
	slot.Store(&b)
	return b
}

// DecodeState decodes a PATCH /1.0 body as LXD does (the first JSON value;
// unknown fields ignored) and checks the state. Its errors are the exact
// messages answered with 400.
func DecodeState(body []byte) (ready bool, err error) {
	if err := utf8check.Body(body); err != nil {
		return false, err
	}
	var req devlxdapi.StatePut
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		return false, fmt.Errorf("Invalid request body: %w", err) //nolint:staticcheck // LXD's wire message.
	}
	switch req.State {
	case devlxdapi.StateReady:
		return true, nil
	case devlxdapi.StateStarted:
		return false, nil
	}
	return false, fmt.Errorf("Invalid state %q", req.State) //nolint:staticcheck // LXD's wire message.
}

func (s *Server) patchState(c *fiber.Ctx) error {
	inst := callerOf(c)
	if !s.stateLimits.Allow(inst.UUID) {
		return sendError(c, http.StatusTooManyRequests, "")
	}
	d, err := DecodeDeclaration(c.Body())
	var be *BodyError
	if errors.As(err, &be) && s.isVM(c) {
		// LXD's VM agent decodes the body itself and answers its
		// decoder's error as a 500.
		return sendError(c, http.StatusInternalServerError, be.Err.Error())
	}
	if err != nil {
		return sendError(c, http.StatusBadRequest, err.Error())
	}
	id := c.Locals(localsIdentity).(linkhost.Identity)
	ctx, cancel := s.reqCtx()
	defer cancel()
	by := events.Requestor{Protocol: "devlxd", Address: string(id.Link)}
	if dc, ok := s.cfg.Instances.(Declarer); ok {
		err = dc.Declare(ctx, inst.UUID, d, by)
	} else {
		err = s.cfg.Instances.SetReady(ctx, inst.UUID, d.State == instance.DeclaredReady, by)
	}
	if err != nil && s.life.Err() != nil {
		// The daemon stops (Shutdown cancelled the call): the change may
		// not be recorded, and the guest's next declaration goes to the
		// next daemon. Not a warning per guest of a storm.
		s.cfg.Logger.Debug("devlxd: state change cut by the daemon's stop", "instance", inst.Name, "state", d.State, "err", err)
		return sendError(c, http.StatusServiceUnavailable, "")
	}
	if err != nil {
		s.cfg.Logger.Warn("devlxd: setting ready state", "instance", inst.Name, "state", d.State, "err", err)
		return sendError(c, errdefs.HTTPStatus(err), "")
	}
	return sendSync(c, nil)
}

func (s *Server) getConfig(c *fiber.Ctx) error {
	cfg := callerOf(c).Config
	keys := append(guestview.ListedKeys(cfg), cloudinit.ListedRoutes(cfg)...)
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = "/1.0/config/" + k
	}
	return sendSync(c, paths)
}

func (s *Server) getConfigKey(c *fiber.Ctx) error {
	raw := strings.TrimPrefix(c.Path(), "/1.0/config/")
	key, err := url.PathUnescape(raw)
	if err != nil || key == "" {
		return sendError(c, http.StatusNotFound, "")
	}
	if !guestview.VisibleKey(key) {
		return sendError(c, http.StatusForbidden, "")
	}
	cfg := callerOf(c).Config
	v := cfg[key]
	if cloudinit.IsSeedKey(key) {
		v = cloudinit.Value(cfg, key)
	}
	if v == "" {
		return sendError(c, http.StatusNotFound, "")
	}
	return sendSync(c, v)
}

func (s *Server) getMetaData(c *fiber.Ctx) error {
	return sendSync(c, guestview.MetaData(callerOf(c)))
}

func (s *Server) getDevices(c *fiber.Ctx) error {
	return sendSync(c, guestview.Devices(callerOf(c)))
}

// sendSync answers 200 with the success envelope carrying v.
func sendSync(c *fiber.Ctx, v any) error {
	b, err := devlxdapi.SyncResponse(v)
	if err != nil {
		return sendError(c, http.StatusInternalServerError, "")
	}
	return sendEnvelope(c, b)
}

// sendEnvelope answers 200 with the encoded success envelope b.
func sendEnvelope(c *fiber.Ctx, b []byte) error {
	c.Status(http.StatusOK)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// sendError answers code with the error envelope; an empty msg is the
// status text.
func sendError(c *fiber.Ctx, code int, msg string) error {
	c.Status(code)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(devlxdapi.ErrorResponse(code, msg))
}

// sendErrorText answers code with the error envelope carrying msg as it
// is, "" included.
func sendErrorText(c *fiber.Ctx, code int, msg string) error {
	c.Status(code)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(devlxdapi.ErrorResponseText(code, msg))
}

// errorHandler answers the errors the HTTP layer raises itself (body too
// large, read timeout, malformed request) in the envelope.
func errorHandler(c *fiber.Ctx, err error) error {
	code := http.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	msg := ""
	if code == http.StatusBadRequest && fe != nil {
		msg = fe.Message
	}
	return sendError(c, code, msg)
}
