package safetensors

import (
	"errors"
	"fmt"
)

// Rules a header can break. Each FormatError carries one of them so that a
// person (and a test) can tell which rule of the format the file broke.
const (
	RuleHeaderLength = "header-length" // fewer than 8 bytes, or N = 0
	RuleHeaderTooBig = "header-too-large"
	RuleHeaderBounds = "header-bounds" // 8+N beyond the end of the file
	RuleUTF8         = "utf8"
	RuleJSON         = "json"
	RuleTrailing     = "trailing-data" // bytes after the JSON object inside the header
	RuleMetadata     = "metadata"      // __metadata__ is not a string→string map
	RuleEntry        = "tensor-entry"  // a tensor entry is not {dtype, shape, data_offsets}
	RuleDType        = "dtype"
	RuleShape        = "shape"
	RuleOffsets      = "data-offsets"
	RuleSizeOverflow = "size-overflow" // elements × bits overflows 64 bits
	RuleSubByte      = "sub-byte"      // a sub-byte tensor that does not fill whole bytes
	RuleNBytes       = "nbytes"        // end − begin differs from elements × bits / 8
	RuleContiguous   = "contiguous"    // holes, overlaps, shared ranges, not starting at 0
	RuleFileSize     = "file-size"     // last end + 8 + N differs from the file size
	RuleDuplicateKey = "duplicate-key"
	RuleEmptyName    = "empty-name"
	RuleNameControl  = "name-control"
)

// MaxHeaderLen is the largest header the reader accepts (the Rust reference's limit).
const MaxHeaderLen = 100_000_000

// ErrHeaderTooLarge is wrapped by the FormatError for a header over MaxHeaderLen.
var ErrHeaderTooLarge = errors.New("safetensors: header too large")

// ErrShortPrefix is returned by ParsePrefix when the prefix does not hold the
// whole header; PrefixNeed says how many bytes are needed.
var ErrShortPrefix = errors.New("safetensors: prefix shorter than the header")

// FormatError describes input that breaks a rule of the safetensors format.
type FormatError struct {
	File   string // the file's name as the caller gave it; may be empty
	Tensor string // the tensor the rule applies to; empty for header-wide rules
	Offset int64  // byte offset in the file where the problem was found, or -1
	Rule   string // one of the Rule constants
	Msg    string
	Err    error // an underlying sentinel, for errors.Is
}

func (e *FormatError) Error() string {
	s := ""
	if e.File != "" {
		s = e.File + ": "
	}
	if e.Tensor != "" {
		s += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	s += fmt.Sprintf("rule %s: %s", e.Rule, e.Msg)
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (at byte %d)", e.Offset)
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }
