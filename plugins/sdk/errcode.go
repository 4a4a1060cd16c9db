package sdk

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kindCodes maps the error kinds to the gRPC codes they cross the plugin
// boundary as. The order matters only for errors that match several kinds:
// the first wins.
var kindCodes = [...]struct {
	kind error
	code codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrInvalid, codes.InvalidArgument},
	{ErrConflict, codes.FailedPrecondition},
	{ErrNotSupported, codes.Unimplemented},
	{ErrUnavailable, codes.Unavailable},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// toStatus turns a Backend error into a gRPC status error carrying the
// error's kind as its code and its full text as the message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, kc := range kindCodes {
		if errors.Is(err, kc.kind) {
			return status.Error(kc.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// remoteError is an error that came back from a plugin: its text is the
// plugin's message and it matches its kind with errors.Is.
type remoteError struct {
	kind error // nil for kind-less errors
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// fromStatus turns an error returned by the gRPC client for a call made
// with ctx back into an error of this package's kinds. Errors that are not
// gRPC statuses, transport failures (codes.Unavailable) and cancellations
// the caller did not ask for (the connection closed) become ErrUnavailable.
func fromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &remoteError{kind: ErrUnavailable, msg: "plugin: " + err.Error()}
	}
	if st.Code() == codes.Canceled && ctx.Err() == nil {
		return &remoteError{kind: ErrUnavailable, msg: "plugin connection closed: " + st.Message()}
	}
	for _, kc := range kindCodes {
		if st.Code() == kc.code {
			return &remoteError{kind: kc.kind, msg: st.Message()}
		}
	}
	return &remoteError{msg: st.Message()}
}
