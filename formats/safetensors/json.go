package safetensors

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a JSON reader for exactly the shape of a safetensors header: one
// object whose values are string maps or {dtype, shape, data_offsets} entries.
// encoding/json cannot report duplicate keys and is several times slower on
// the 300 KB headers of large shards, so the header grammar is read by hand.
// The header is held as one string so that names without escapes are
// substrings of it (no allocation per name), and shapes share one arena.
type scanner struct {
	b     string
	i     int
	file  string
	arena []uint64
	plain bool // the last string read held only printable ASCII and no escape
}

// Bytes of a string as str sees them.
const (
	strPlain = iota
	strQuote
	strEscape
	strControl
	strHigh // the first byte of a multi-byte UTF-8 sequence, or a bad one
)

var strClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = strControl
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = strHigh
	}
	t['"'], t['\\'] = strQuote, strEscape
	return t
}()

// nameControl is controlAt for the name str just read: a plain string can
// hold no control character but DEL.
func (s *scanner) nameControl(name string) int {
	if s.plain {
		return strings.IndexByte(name, 0x7f)
	}
	return controlAt(name)
}

func (s *scanner) fail(rule, tensor, msg string) *FormatError {
	return &FormatError{File: s.file, Tensor: tensor, Offset: 8 + int64(s.i), Rule: rule, Msg: msg}
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// expect consumes c after optional whitespace.
func (s *scanner) expect(c byte, tensor, what string) error {
	s.ws()
	if s.i >= len(s.b) {
		return s.fail(RuleJSON, tensor, "unexpected end of header, want "+what)
	}
	if s.b[s.i] != c {
		return s.fail(RuleJSON, tensor, "want "+what+", found "+quoteByte(s.b[s.i]))
	}
	s.i++
	return nil
}

// peek returns the next non-space byte without consuming it (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return "byte 0x" + strconv.FormatUint(uint64(c), 16)
}

// str reads a JSON string, resolving escapes.
func (s *scanner) str(tensor string) (string, error) {
	if err := s.expect('"', tensor, "a string"); err != nil {
		return "", err
	}
	start := s.i
	plain := true
	for s.i < len(s.b) {
		if s.i = PlainRun(s.b, s.i); s.i == len(s.b) {
			break
		}
		switch strClass[s.b[s.i]] { // not strPlain: PlainRun passed those
		case strQuote:
			out := s.b[start:s.i]
			s.i++
			s.plain = plain
			return out, nil
		case strEscape:
			s.plain = false
			return s.strSlow(start, tensor)
		case strControl:
			return "", s.fail(RuleJSON, tensor, "control character in string")
		}
		if !s.rune() {
			return "", s.fail(RuleUTF8, tensor, "string is not valid UTF-8")
		}
		plain = false
	}
	return "", s.fail(RuleJSON, tensor, "unterminated string")
}

// rune passes over one valid multi-byte UTF-8 sequence at s.i.
func (s *scanner) rune() bool {
	r, w := utf8.DecodeRuneInString(s.b[s.i:])
	if r == utf8.RuneError && w <= 1 {
		return false
	}
	s.i += w
	return true
}

func (s *scanner) strSlow(start int, tensor string) (string, error) {
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(buf), nil
		case c < 0x20:
			return "", s.fail(RuleJSON, tensor, "control character in string")
		case c >= utf8.RuneSelf:
			at := s.i
			if !s.rune() {
				return "", s.fail(RuleUTF8, tensor, "string is not valid UTF-8")
			}
			buf = append(buf, s.b[at:s.i]...)
			continue
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.fail(RuleJSON, tensor, "bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					lo, ok := s.hex4()
					if !ok {
						return "", s.fail(RuleJSON, tensor, "bad \\u escape")
					}
					r2 = utf16.DecodeRune(r, lo)
				}
				r = r2
			}
			buf = utf8.AppendRune(buf, r)
		default:
			s.i -= 2
			return "", s.fail(RuleJSON, tensor, "bad escape "+quoteByte(e))
		}
	}
	return "", s.fail(RuleJSON, tensor, "unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// uint reads a JSON number that must be a non-negative integer fitting 64 bits.
func (s *scanner) uint(tensor, rule, field string) (uint64, error) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i]-'0' <= 9 {
		d := uint64(s.b[s.i] - '0')
		if s.i-start >= 19 && v > (1<<64-1-d)/10 { // 19 digits cannot overflow
			return 0, s.fail(rule, tensor, field+": integer does not fit 64 bits")
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 {
		if s.i < len(s.b) {
			return 0, s.fail(rule, tensor, field+": want a non-negative integer, found "+quoteByte(s.b[s.i]))
		}
		return 0, s.fail(RuleJSON, tensor, "unexpected end of header")
	}
	if n > 1 && s.b[start] == '0' {
		s.i = start
		return 0, s.fail(RuleJSON, tensor, field+": leading zero in number")
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, s.fail(rule, tensor, field+": want an integer, found a fraction or exponent")
		}
	}
	return v, nil
}

// uints reads an array of non-negative integers.
func (s *scanner) uints(tensor, rule, field string, max int) ([]uint64, error) {
	if s.peek() == '[' {
		s.i++
	} else if err := s.expect('[', tensor, field+" array"); err != nil { // the text only for an error
		if fe, ok := err.(*FormatError); ok {
			fe.Rule = rule
		}
		return nil, err
	}
	start := len(s.arena)
	if s.peek() == ']' {
		s.i++
		return s.arena[start:start:start], nil
	}
	for {
		if len(s.arena)-start == max {
			return nil, s.fail(rule, tensor, field+": too many elements")
		}
		v, err := s.uint(tensor, rule, field)
		if err != nil {
			return nil, err
		}
		s.arena = append(s.arena, v)
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return s.arena[start:len(s.arena):len(s.arena)], nil
		default:
			return nil, s.fail(RuleJSON, tensor, field+": want ',' or ']'")
		}
	}
}
