// Package proto is the companion's websocket protocol: versioned JSON
// messages (hello, submit, progress, result, error, cancel) in text frames,
// and bulk arrays (histograms, value grids, error maps, output files) in
// binary frames. It is pure Go (no net/http, no websocket library) so that the
// companion and the page's wasm engine share it. docs/protocol.md is its
// specification.
package proto

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Version is the protocol version a hello announces. A client that does not
// know it should say so and not submit.
const Version = 1

// Message types, the "type" field of every text frame.
const (
	TypeHello    = "hello"
	TypeSubmit   = "submit"
	TypeProgress = "progress"
	TypeResult   = "result"
	TypeError    = "error"
	TypeCancel   = "cancel"
)

// Message is one text frame.
type Message interface{ msgType() string }

// GPU is one accelerator the companion can run kernels on.
type GPU struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
	FreeBytes   int64  `json:"free_bytes,omitempty"`
}

// Limits are what the companion accepts from one connection.
type Limits struct {
	MaxMessageBytes int64 `json:"max_message_bytes"` // a larger message closes the connection
	MaxJobs         int   `json:"max_jobs"`          // running jobs per connection
	MaxJobsTotal    int   `json:"max_jobs_total"`    // running jobs across all connections
}

// Hello is the companion's first message on every connection.
type Hello struct {
	Protocol int      `json:"protocol"` // Version
	Program  string   `json:"program"`  // the quantscope build ("v1.2.3", "devel")
	Backends []string `json:"backends"` // where kernels run, first is the default: "cpu (16 cores)"
	CPUCores int      `json:"cpu_cores"`
	GPUs     []GPU    `json:"gpus"` // empty when none
	Ops      []string `json:"ops"`  // the operations a submit may name
	Limits   Limits   `json:"limits"`
	// LocalFiles: jobs may name local files (a checkpoint folder as
	// source, calibration data) at paths relative to the folder the
	// companion was started with (`serve --in-dir DIR`); without it none.
	LocalFiles bool `json:"local_files"`
}

// Submit asks for one operation on one module of a source. The companion
// reads the bytes itself: Source is any SOURCE form of the command line
// (ORG/NAME, a hub URL, a .safetensors URL), or a path relative to the
// folder the companion was started with (`serve --in-dir`).
type Submit struct {
	ID       string          `json:"id"` // chosen by the client, unique among its running jobs
	Op       string          `json:"op"`
	Source   string          `json:"source"`
	Revision string          `json:"revision,omitempty"`
	Endpoint string          `json:"endpoint,omitempty"` // hub endpoint for ORG/NAME (default: the companion's)
	HubToken string          `json:"hub_token,omitempty"`
	Module   string          `json:"module,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
}

// Progress says how far a job has come. Done/Total count the phase's units
// (shards while reading headers, the op's own units after); Total 0 means
// unknown. A running job sends one at least every 250 ms.
type Progress struct {
	ID        string `json:"id"`
	Phase     string `json:"phase"` // "headers", "waiting", or the op's name
	Done      int64  `json:"done"`
	Total     int64  `json:"total"`
	ElapsedMS int64  `json:"elapsed_ms"`
	Note      string `json:"note,omitempty"` // e.g. "read from the Hugging Face cache at PATH"
}

// ArrayDesc describes a binary frame that follows a result.
type ArrayDesc struct {
	Name  string `json:"name"`
	DType string `json:"dtype"` // DType.String()
	Shape []int  `json:"shape"`
}

// FileDesc describes an output file: written at Path on the companion's
// machine, or sent as the binary frame named "file:"+Name (dtype u8).
type FileDesc struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	Size int64  `json:"size"`
}

// Result is a job's answer. The binary frames of Arrays follow it, in order,
// each carrying the job's ID and the array's name.
type Result struct {
	ID        string          `json:"id"`
	JSON      json.RawMessage `json:"json"`
	Arrays    []ArrayDesc     `json:"arrays"`
	Files     []FileDesc      `json:"files,omitempty"`
	Note      string          `json:"note,omitempty"`
	ElapsedMS int64           `json:"elapsed_ms"`
}

// Error codes.
const (
	CodeFailed     = "failed"      // the operation failed (Rule/Tensor/File say where, when known)
	CodeCancelled  = "cancelled"   // a cancel message, or the companion shutting down
	CodeBadRequest = "bad-request" // malformed message, unknown op, duplicate id
	CodeLimit      = "limit"       // too many running jobs
	CodeSlow       = "slow-client" // never sent: the connection is closed instead
)

// Error is a job's failure, or (with an empty ID) a message the companion
// could not read.
type Error struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Rule    string `json:"rule,omitempty"`
	Tensor  string `json:"tensor,omitempty"`
	Module  string `json:"module,omitempty"`
	File    string `json:"file,omitempty"`
	Status  int    `json:"status,omitempty"` // an HTTP status from the hub
}

// Cancel stops a running job; the companion answers with an Error of code
// "cancelled" at once and sends nothing more for that job.
type Cancel struct {
	ID string `json:"id"`
}

func (Hello) msgType() string    { return TypeHello }
func (Submit) msgType() string   { return TypeSubmit }
func (Progress) msgType() string { return TypeProgress }
func (Result) msgType() string   { return TypeResult }
func (Error) msgType() string    { return TypeError }
func (Cancel) msgType() string   { return TypeCancel }

// Encode writes m as one text frame: its fields plus "type".
func Encode(m Message) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("proto: encoding %s: %w", m.msgType(), err)
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("proto: encoding %s: not an object", m.msgType())
	}
	out := make([]byte, 0, len(b)+20)
	out = append(out, `{"type":"`...)
	out = append(out, m.msgType()...)
	out = append(out, '"')
	if len(b) > 2 {
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

// Decode reads one text frame. Unknown types and unknown fields are errors
// (a client and a companion of different versions find out at once).
func Decode(b []byte) (Message, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("proto: not a JSON object: %w", err)
	}
	var m Message
	switch head.Type {
	case TypeHello:
		m = &Hello{}
	case TypeSubmit:
		m = &Submit{}
	case TypeProgress:
		m = &Progress{}
	case TypeResult:
		m = &Result{}
	case TypeError:
		m = &Error{}
	case TypeCancel:
		m = &Cancel{}
	case "":
		return nil, fmt.Errorf("proto: message has no \"type\"")
	default:
		return nil, fmt.Errorf("proto: unknown message type %q", head.Type)
	}
	// The structs have no "type" field: take it out, then decode strictly.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("proto: not a JSON object: %w", err)
	}
	delete(raw, "type")
	rest, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("proto: %s: %w", head.Type, err)
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("proto: %s: %w", head.Type, err)
	}
	return deref(m), nil
}

func deref(m Message) Message {
	switch v := m.(type) {
	case *Hello:
		return *v
	case *Submit:
		return *v
	case *Progress:
		return *v
	case *Result:
		return *v
	case *Error:
		return *v
	case *Cancel:
		return *v
	}
	return m
}

// Check says what is wrong with a submit before any work starts.
func (s Submit) Check() error {
	switch {
	case s.ID == "":
		return fmt.Errorf("submit: no id")
	case len(s.ID) > MaxIDLen:
		return fmt.Errorf("submit: id longer than %d bytes", MaxIDLen)
	case s.Op == "":
		return fmt.Errorf("submit %s: no op", s.ID)
	case s.Source == "":
		return fmt.Errorf("submit %s: no source", s.ID)
	}
	return nil
}
