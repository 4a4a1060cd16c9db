package api

// Response types of the envelope.
const (
	TypeSync  = "sync"
	TypeError = "error"
)

// Response is the LXD response envelope: every admin API answer and every
// devlxd answer between the daemon and the agent is wrapped in it. Sync
// answers have Type "sync", Status "Success" and StatusCode 200; errors have
// Type "error", ErrorCode set to the HTTP status and Error to the message.
// Field order and names are the wire format.
//
// M is the Go type of the metadata: any when encoding a value (see Sync),
// json.RawMessage when the metadata is read later, or the expected type
// when it is decoded in the same pass.
type Response[M any] struct {
	// Type is "sync" on success and "error" on failure.
	Type string `json:"type"`
	// Status is "Success" on success and empty on error.
	Status string `json:"status"`
	// StatusCode is 200 on success and 0 on error.
	StatusCode int `json:"status_code"`
	// Operation is the URL of the operation an async answer (exec) started,
	// empty otherwise.
	Operation string `json:"operation"`
	// ErrorCode is the HTTP status of an error, 0 on success.
	ErrorCode int `json:"error_code"`
	// Error is the error message, empty on success.
	Error string `json:"error"`
	// Metadata is the answer's value on success, null on error.
	Metadata M `json:"metadata"`
}

// Sync returns the success envelope around metadata.
func Sync(metadata any) Response[any] {
	return Response[any]{Type: TypeSync, Status: "Success", StatusCode: 200, Metadata: metadata}
}

// Error returns the error envelope for an HTTP status code and a message.
func Error(code int, msg string) Response[any] {
	return Response[any]{Type: TypeError, ErrorCode: code, Error: msg}
}
