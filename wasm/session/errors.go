package session

import (
	"context"
	"errors"
	"strings"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// ErrorInfo is an error sorted for the page: what happened, in a kind the
// page can act on (offer the token field, show the rule and tensor).
type ErrorInfo struct {
	Kind    string `json:"kind"` // auth | not-found | format | config | not-safetensors | network | cancelled | other
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Tensor  string `json:"tensor,omitempty"`
	File    string `json:"file,omitempty"`
}

// Classify sorts an error from Open or Sample.
func Classify(err error) ErrorInfo {
	info := ErrorInfo{Kind: "other", Message: err.Error()}
	var he *hub.HTTPError
	var fe *safetensors.FormatError
	var ce *scheme.ConfigError
	var de *scheme.DequantError
	switch {
	case errors.Is(err, context.Canceled):
		info.Kind = "cancelled"
	case errors.As(err, &fe):
		info.Kind, info.Rule, info.Tensor, info.File = "format", fe.Rule, fe.Tensor, fe.File
	case errors.As(err, &ce):
		info.Kind, info.File, info.Rule = "config", ce.File, "config"
	case errors.As(err, &de):
		info.Kind, info.Rule, info.Tensor = "format", de.Rule, de.Tensor
	case errors.As(err, &he):
		info.Status = he.Status
		switch he.Status {
		case 401, 403:
			info.Kind = "auth"
		case 404:
			info.Kind = "not-found"
		default:
			info.Kind = "network"
		}
	case strings.Contains(err.Error(), "rule no-safetensors"):
		info.Kind, info.Rule = "not-safetensors", "no-safetensors"
	case strings.Contains(err.Error(), "rule index-"):
		info.Kind = "format"
	case isNetwork(err):
		info.Kind = "network"
	}
	return info
}

// FetchError is the Fetcher's failure to get any response: in a browser the
// network is down or a CORS check refused the answer, which scripts cannot
// tell apart.
type FetchError struct{ Msg string }

func (e *FetchError) Error() string { return e.Msg }

func isNetwork(err error) bool {
	var fe *FetchError
	return errors.As(err, &fe) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "unexpected EOF")
}
