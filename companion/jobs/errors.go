package jobs

import (
	"context"
	"errors"
	"regexp"

	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// ruleInText finds "rule NAME" in errors that carry their rule only in
// their text (the repo-wide checks of formats/checkpoint).
var ruleInText = regexp.MustCompile(`\brule ([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// errorMessage turns an op's error into the error message, with the rule,
// tensor, module and file where the error carries them, as the command line
// prints them in its one `error:` line.
func errorMessage(id string, err error) proto.Error {
	e := proto.Error{ID: id, Code: proto.CodeFailed, Message: err.Error()}
	if errors.Is(err, context.Canceled) {
		e.Code = proto.CodeCancelled
	}
	var fe *safetensors.FormatError
	var de *scheme.DequantError
	var ce *scheme.ConfigError
	var le *packing.LayoutError
	var he *hub.HTTPError
	switch {
	case errors.As(err, &fe):
		e.Rule, e.Tensor, e.File = fe.Rule, fe.Tensor, fe.File
	case errors.As(err, &de):
		e.Rule, e.Tensor, e.Module = de.Rule, de.Tensor, de.Module
	case errors.As(err, &ce):
		e.Rule, e.File = "config", ce.File
	case errors.As(err, &le):
		e.Rule = le.Rule
	}
	if errors.As(err, &he) {
		e.Status = he.Status
	}
	if e.Rule == "" {
		if m := ruleInText.FindStringSubmatch(e.Message); m != nil {
			e.Rule = m[1]
		}
	}
	return e
}
