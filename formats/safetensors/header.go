// Package safetensors reads, validates and writes the safetensors container:
// an 8-byte little-endian header length N, N bytes of JSON, then the data.
//
// The reader is hardened against hostile headers: every allocation is bounded
// by the file's size or MaxHeaderLen before it is made, size arithmetic is
// checked for overflow, and every rule of the format (contiguous offsets, sizes
// that match dtype × shape, no duplicate keys, no control characters in names,
// a data section that ends where the file ends) is enforced with a
// *FormatError naming the file, the tensor and the rule. It never reads tensor data; callers get offsets and sections.
package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Tensor is one entry of a header.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	// Begin and End are the data_offsets, relative to the start of the data
	// section (8 + N bytes into the file).
	Begin, End uint64
}

// Elements is the product of the shape (1 for a scalar).
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d // validated against overflow when parsed
	}
	return n
}

// NBytes is the size of the tensor's data.
func (t *Tensor) NBytes() uint64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	File     string
	Len      uint64            // N, the JSON length
	Metadata map[string]string // __metadata__, nil when absent
	Tensors  []Tensor          // in data order (sorted by Begin)

	byNameOnce sync.Once // Lookup's order, made on its first call
	byName     []int32   // indices of Tensors in name order
}

// DataStart is the file offset of the data section.
func (h *Header) DataStart() int64 { return 8 + int64(h.Len) }

// DataLen is the length of the data section (the last tensor's end).
func (h *Header) DataLen() uint64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	return h.Tensors[len(h.Tensors)-1].End
}

// FileSize is the size the file must have: 8 + N + DataLen.
func (h *Header) FileSize() int64 { return h.DataStart() + int64(h.DataLen()) }

// Lookup finds a tensor by name.
func (h *Header) Lookup(name string) (*Tensor, bool) {
	// A sorted list of indices, 4 bytes a tensor: a map would cost ten
	// times that, for a lookup most users of a header never make.
	h.byNameOnce.Do(func() {
		h.byName = make([]int32, len(h.Tensors))
		for i := range h.byName {
			h.byName[i] = int32(i)
		}
		slices.SortFunc(h.byName, func(a, b int32) int { return strings.Compare(h.Tensors[a].Name, h.Tensors[b].Name) })
	})
	k, ok := slices.BinarySearchFunc(h.byName, name, func(i int32, name string) int { return strings.Compare(h.Tensors[i].Name, name) })
	if !ok {
		return nil, false
	}
	return &h.Tensors[h.byName[k]], true
}

// Section returns a reader over one tensor's bytes.
func (h *Header) Section(r io.ReaderAt, t *Tensor) *io.SectionReader {
	return io.NewSectionReader(r, h.DataStart()+int64(t.Begin), int64(t.NBytes()))
}

// PrefixNeed tells how many leading bytes of a file of the given size (or -1
// when unknown) hold its whole header: 8 when the prefix is shorter than the
// length field, else 8+N. It fails when the length field itself breaks a rule,
// so a remote reader never asks for a hostile amount.
func PrefixNeed(file string, prefix []byte, size int64) (int64, error) {
	if len(prefix) < 8 {
		if size >= 0 && size < 8 {
			return 0, &FormatError{File: file, Offset: 0, Rule: RuleHeaderLength,
				Msg: fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", size)}
		}
		return 8, nil
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n == 0 {
		return 0, &FormatError{File: file, Offset: 0, Rule: RuleHeaderLength, Msg: "header length is 0"}
	}
	if n > MaxHeaderLen {
		msg := fmt.Sprintf("header length %d exceeds the limit of %d", n, MaxHeaderLen)
		if looksLikeText(prefix[:8]) {
			// JSON, HTML, a Git LFS pointer, a pickle's text: not a
			// safetensors file at all, which starts with a binary length.
			msg = fmt.Sprintf("not a safetensors file: it starts with text (%q) where a safetensors file has its header's 8-byte length; %s", prefix[:8], msg)
		}
		return 0, &FormatError{File: file, Offset: 0, Rule: RuleHeaderTooBig, Err: ErrHeaderTooLarge, Msg: msg}
	}
	if size >= 0 && n > uint64(size)-8 {
		return 0, &FormatError{File: file, Offset: 0, Rule: RuleHeaderBounds,
			Msg: fmt.Sprintf("header length %d runs past the end of the %d-byte file", n, size)}
	}
	return 8 + int64(n), nil
}

// looksLikeText tells whether b is printable ASCII (spaces and line ends
// included): a header length of 8 such bytes is at least 2^53, far past any
// real header.
func looksLikeText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}

// ParsePrefix parses the header from the first bytes of a file. size is the
// file's total size, or -1 when unknown (the file-size rule is then skipped).
// When prefix is too short it returns an error wrapping ErrShortPrefix;
// PrefixNeed gives the exact length to fetch.
func ParsePrefix(file string, prefix []byte, size int64) (*Header, error) {
	js, err := prefixJSON(file, prefix, size)
	if err != nil {
		return nil, err
	}
	return parseJSON(file, js, size, false)
}

// prefixJSON is the header's JSON in a file's first bytes, or why the
// bytes are not enough (ErrShortPrefix) or break the length rules.
func prefixJSON(file string, prefix []byte, size int64) ([]byte, error) {
	need, err := PrefixNeed(file, prefix, size)
	if err != nil {
		return nil, err
	}
	if int64(len(prefix)) < need {
		return nil, fmt.Errorf("%s: have %d bytes, need %d: %w", file, len(prefix), need, ErrShortPrefix)
	}
	return prefix[8:need], nil
}

// ParseOwnedPrefix is ParsePrefix for a caller that hands the buffer over:
// the header's names are then views into prefix, not a copy of it, so
// prefix must never be changed afterwards.
func ParseOwnedPrefix(file string, prefix []byte, size int64) (*Header, error) {
	js, err := prefixJSON(file, prefix, size)
	if err != nil {
		return nil, err
	}
	return parseJSON(file, js, size, true)
}

// ParseReusedPrefix is ParsePrefix for a caller that reuses prefix once it
// returns (a buffer that reads the next shard's header): the names are read
// in place and then moved together into one allocation of their own. A
// header's names are about a third of its bytes, so this keeps neither the
// prefix nor a copy of the whole header.
func ParseReusedPrefix(file string, prefix []byte, size int64) (*Header, error) {
	js, err := prefixJSON(file, prefix, size)
	if err != nil {
		return nil, err
	}
	h, err := parseValid(file, js, size, true)
	if err != nil {
		// the same error again, its strings in a copy of the header: the
		// caller's buffer changes under them once reused
		return parseJSON(file, js, size, false)
	}
	h.ownNames()
	return h, nil
}

// ownNames moves the header's strings out of the bytes they were parsed in.
func (h *Header) ownNames() {
	n := 0
	for i := range h.Tensors {
		n += len(h.Tensors[i].Name)
	}
	buf := make([]byte, 0, n)
	for i := range h.Tensors {
		t := &h.Tensors[i]
		if t.Name == "" {
			continue
		}
		at := len(buf)
		buf = append(buf, t.Name...)
		t.Name = unsafe.String(&buf[at], len(t.Name))
	}
	if h.Metadata != nil {
		m := make(map[string]string, len(h.Metadata))
		for k, v := range h.Metadata {
			m[strings.Clone(k)] = strings.Clone(v)
		}
		h.Metadata = m
	}
}

// chunk bounds how much Read allocates ahead of what the reader has proven to hold.
const chunk = 8 << 20

// Read reads and validates the header of a file of the given size (-1 when
// unknown) from r. Memory is bounded by the file size, or when that is unknown,
// grows only as bytes actually arrive.
func Read(r io.ReaderAt, size int64, file string) (*Header, error) {
	var lenb [8]byte
	if _, err := r.ReadAt(lenb[:], 0); err != nil {
		if err == io.EOF {
			return nil, &FormatError{File: file, Offset: 0, Rule: RuleHeaderLength, Msg: "file is shorter than the 8-byte header length", Err: io.ErrUnexpectedEOF}
		}
		return nil, fmt.Errorf("%s: reading header length: %w", file, err)
	}
	need, err := PrefixNeed(file, lenb[:], size)
	if err != nil {
		return nil, err
	}
	n := need - 8
	buf := make([]byte, 0, min(n, chunk))
	for int64(len(buf)) < n {
		k := min(n-int64(len(buf)), chunk)
		start := len(buf)
		buf = slices.Grow(buf, int(k))[:start+int(k)]
		got, err := r.ReadAt(buf[start:], 8+int64(start))
		if int64(got) < k {
			if err == nil || err == io.EOF {
				return nil, &FormatError{File: file, Offset: 8 + int64(start+got), Rule: RuleHeaderBounds,
					Msg: fmt.Sprintf("file ends inside the %d-byte header", n), Err: io.ErrUnexpectedEOF}
			}
			return nil, fmt.Errorf("%s: reading header: %w", file, err)
		}
	}
	return parseJSON(file, buf, size, true) // buf is this function's own
}

// Parse reads the header of a complete file held in memory.
func Parse(file string, data []byte) (*Header, error) {
	return ParsePrefix(file, data, int64(len(data)))
}

// parseJSON parses the header object. The names are substrings of one string
// holding js: a copy of it, or when owned (nobody changes js afterwards) js
// itself.
func parseJSON(file string, js []byte, size int64, owned bool) (*Header, error) {
	h, err := parseValid(file, js, size, owned)
	if err != nil {
		// The scanner checks the UTF-8 of the strings it reads, and any
		// other byte outside ASCII is a syntax error: only then is the
		// whole header checked, so that bad UTF-8 is reported as such,
		// wherever it lies, before any other rule.
		if !utf8.Valid(js) {
			off := 0
			for off < len(js) {
				r, w := utf8.DecodeRune(js[off:])
				if r == utf8.RuneError && w <= 1 {
					break
				}
				off += w
			}
			return nil, &FormatError{File: file, Offset: 8 + int64(off), Rule: RuleUTF8, Msg: "header is not valid UTF-8"}
		}
		return nil, err
	}
	return h, nil
}

// parseValid is parseJSON on a header whose UTF-8 the caller checks when
// it fails.
func parseValid(file string, js []byte, size int64, owned bool) (*Header, error) {
	b := ""
	if owned && len(js) > 0 {
		b = unsafe.String(&js[0], len(js))
	} else {
		b = string(js)
	}
	// Every entry has two arrays (shape, data_offsets), so half the ']'
	// bytes bounds the entries from above but for names that hold one. A
	// one-byte count is a vector loop; counting `"data_offsets"` stopped at
	// every '"'. Sized by it, the tensors are read without growing, and
	// the shapes' arena holds two dimensions a tensor (most have two or
	// fewer; more grow it) plus the offsets of the entry being read.
	n := min(CountByte(b, ']')/2, len(js)/40) + 1
	s := &scanner{b: b, file: file, arena: make([]uint64, 0, 2*n+8)}
	h := &Header{File: file, Len: uint64(len(js))}
	if err := s.expect('{', "", "the header object '{'"); err != nil {
		return nil, err
	}
	h.Tensors = make([]Tensor, 0, n)
	names := newNameSet(n)
	defer names.release()
	offsets := names.offsets[:0] // where each entry starts, for errors
	defer func() { names.offsets = offsets[:0] }()
	seenMeta := false
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			keyAt := 8 + int64(s.i)
			key, err := s.str("")
			if err != nil {
				return nil, err
			}
			if err := s.expect(':', key, "':'"); err != nil {
				return nil, err
			}
			switch {
			case key == "":
				return nil, &FormatError{File: file, Offset: keyAt, Rule: RuleEmptyName, Msg: "empty tensor name"}
			case s.nameControl(key) >= 0:
				i := controlAt(key)
				r, _ := utf8.DecodeRuneInString(key[i:])
				return nil, &FormatError{File: file, Tensor: key, Offset: keyAt, Rule: RuleNameControl,
					Msg: fmt.Sprintf("tensor name holds the control character U+%04X at byte %d (it would forge lines in a terminal or a report)", r, i)}
			case key == "__metadata__":
				if seenMeta {
					return nil, &FormatError{File: file, Offset: keyAt, Rule: RuleDuplicateKey, Msg: "__metadata__ appears twice"}
				}
				seenMeta = true
				if h.Metadata, err = s.metadata(); err != nil {
					return nil, err
				}
			default:
				h.Tensors = append(h.Tensors, Tensor{Name: key})
				if _, dup := names.add(h.Tensors, len(h.Tensors)-1); dup {
					return nil, &FormatError{File: file, Tensor: key, Offset: keyAt, Rule: RuleDuplicateKey, Msg: "tensor name appears twice"}
				}
				t, err := s.entry(key)
				if err != nil {
					return nil, err
				}
				h.Tensors[len(h.Tensors)-1] = t
				offsets = append(offsets, keyAt)
			}
			c := s.peek()
			if c == ',' {
				s.i++
				continue
			}
			if c == '}' {
				s.i++
				break
			}
			return nil, s.fail(RuleJSON, key, "want ',' or '}' after an entry")
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, s.fail(RuleTrailing, "", "data after the header's JSON object")
	}
	if err := h.validate(offsets, size); err != nil {
		return nil, err
	}
	return h, nil
}

func (s *scanner) metadata() (map[string]string, error) {
	if s.peek() == 'n' && len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return nil, nil
	}
	if s.peek() != '{' {
		return nil, s.fail(RuleMetadata, "", "__metadata__ must be an object of strings")
	}
	s.i++
	m := map[string]string{}
	if s.peek() == '}' {
		s.i++
		return m, nil
	}
	for {
		k, err := s.str("")
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, s.fail(RuleDuplicateKey, "", fmt.Sprintf("__metadata__ key %q appears twice", k))
		}
		if err := s.expect(':', "", "':'"); err != nil {
			return nil, err
		}
		if s.peek() != '"' {
			return nil, s.fail(RuleMetadata, "", fmt.Sprintf("__metadata__ value of %q is not a string", k))
		}
		v, err := s.str("")
		if err != nil {
			return nil, err
		}
		m[k] = v
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return m, nil
		default:
			return nil, s.fail(RuleJSON, "", "__metadata__: want ',' or '}'")
		}
	}
}

// maxRank bounds shapes; no real tensor has more than a handful of dimensions.
const maxRank = 64

func (s *scanner) entry(name string) (Tensor, error) {
	t := Tensor{Name: name}
	if s.peek() != '{' {
		return t, s.fail(RuleEntry, name, "entry must be an object {dtype, shape, data_offsets}")
	}
	s.i++
	var haveDType, haveShape, haveOffsets bool
	for {
		k, err := s.str(name)
		if err != nil {
			return t, err
		}
		if err := s.expect(':', name, "':'"); err != nil {
			return t, err
		}
		switch k {
		case "dtype":
			if haveDType {
				return t, s.fail(RuleDuplicateKey, name, "dtype appears twice")
			}
			haveDType = true
			if s.peek() != '"' {
				return t, s.fail(RuleDType, name, "dtype must be a string")
			}
			at := s.i
			ds, err := s.str(name)
			if err != nil {
				return t, err
			}
			d, ok := ParseDType(ds)
			if !ok {
				s.i = at
				return t, s.fail(RuleDType, name, fmt.Sprintf("unknown dtype %q", ds))
			}
			t.DType = d
		case "shape":
			if haveShape {
				return t, s.fail(RuleDuplicateKey, name, "shape appears twice")
			}
			haveShape = true
			if t.Shape, err = s.uints(name, RuleShape, "shape", maxRank); err != nil {
				return t, err
			}
		case "data_offsets":
			if haveOffsets {
				return t, s.fail(RuleDuplicateKey, name, "data_offsets appears twice")
			}
			haveOffsets = true
			at, mark := s.i, len(s.arena)
			off, err := s.uints(name, RuleOffsets, "data_offsets", 2)
			if err != nil {
				return t, err
			}
			if len(off) != 2 {
				s.i = at
				return t, s.fail(RuleOffsets, name, fmt.Sprintf("data_offsets must hold 2 integers, has %d", len(off)))
			}
			t.Begin, t.End = off[0], off[1]
			s.arena = s.arena[:mark] // offsets need no arena space once read
		default:
			return t, s.fail(RuleEntry, name, fmt.Sprintf("unknown field %q in tensor entry", k))
		}
		c := s.peek()
		if c == ',' {
			s.i++
			continue
		}
		if c == '}' {
			s.i++
			break
		}
		return t, s.fail(RuleJSON, name, "want ',' or '}' in tensor entry")
	}
	switch {
	case !haveDType:
		return t, s.fail(RuleEntry, name, "entry has no dtype")
	case !haveShape:
		return t, s.fail(RuleEntry, name, "entry has no shape")
	case !haveOffsets:
		return t, s.fail(RuleEntry, name, "entry has no data_offsets")
	}
	return t, nil
}

func (h *Header) validate(entryAt []int64, size int64) error {
	for i := range h.Tensors {
		t := &h.Tensors[i]
		fail := func(rule, msg string) error {
			return &FormatError{File: h.File, Tensor: t.Name, Offset: entryAt[i], Rule: rule, Msg: msg}
		}
		elems := uint64(1)
		for _, d := range t.Shape {
			hi, lo := bits.Mul64(elems, d)
			if hi != 0 {
				return fail(RuleSizeOverflow, fmt.Sprintf("shape %v overflows 64 bits", t.Shape))
			}
			elems = lo
		}
		hi, nbits := bits.Mul64(elems, t.DType.Bits())
		if hi != 0 {
			return fail(RuleSizeOverflow, fmt.Sprintf("%d elements of %s overflow 64 bits", elems, t.DType))
		}
		if nbits%8 != 0 {
			return fail(RuleSubByte, fmt.Sprintf("%d elements of %d-bit %s do not fill whole bytes", elems, t.DType.Bits(), t.DType))
		}
		if t.End < t.Begin {
			return fail(RuleOffsets, fmt.Sprintf("data_offsets [%d, %d] end before they begin", t.Begin, t.End))
		}
		if t.End-t.Begin != nbits/8 {
			return fail(RuleNBytes, fmt.Sprintf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d",
				t.Begin, t.End, t.End-t.Begin, t.DType, t.Shape, nbits/8))
		}
	}
	order := make([]int, len(h.Tensors))
	for i := range order {
		order[i] = i
	}
	sorted := slices.IsSortedFunc(h.Tensors, cmpOffsets)
	if !sorted {
		slices.SortStableFunc(order, func(a, b int) int { return cmpOffsets(h.Tensors[a], h.Tensors[b]) })
	}
	var pos uint64
	for k, i := range order {
		t := &h.Tensors[i]
		if t.Begin != pos {
			what := "a hole before it"
			switch {
			case k == 0:
				what = "the first tensor must begin at 0"
			case t.Begin < pos:
				what = "it overlaps or shares bytes with the tensor before it"
			}
			return &FormatError{File: h.File, Tensor: t.Name, Offset: entryAt[i], Rule: RuleContiguous,
				Msg: fmt.Sprintf("data_offsets [%d, %d]: %s (expected begin %d)", t.Begin, t.End, what, pos)}
		}
		pos = t.End
	}
	if size >= 0 {
		if want := uint64(h.DataStart()) + pos; pos > uint64(size) || want != uint64(size) {
			return &FormatError{File: h.File, Offset: -1, Rule: RuleFileSize,
				Msg: fmt.Sprintf("header and data need %d bytes (8 + %d + %d), the file has %d", 8+h.Len+pos, h.Len, pos, size)}
		}
	}
	if !sorted {
		tensors := make([]Tensor, len(order))
		for k, i := range order {
			tensors[k] = h.Tensors[i]
		}
		h.Tensors = tensors
	}
	return nil
}

func cmpOffsets(a, b Tensor) int {
	if a.Begin != b.Begin {
		if a.Begin < b.Begin {
			return -1
		}
		return 1
	}
	switch {
	case a.End < b.End:
		return -1
	case a.End > b.End:
		return 1
	}
	return 0
}

// controlAt is the byte index of the first control character in a name
// (C0, DEL or C1), or -1.
func controlAt(name string) int {
	for i, r := range name {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return i
		}
	}
	return -1
}
