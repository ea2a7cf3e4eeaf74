package checkpoint

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// parseIndex reads model.safetensors.index.json. A large model's index holds
// hundreds of thousands of names with a few dozen distinct shard names, so
// it is read by hand: names are substrings of the file, shard names interned,
// and only metadata (small) goes through encoding/json. It keeps b: the
// caller must not change it afterwards.
func parseIndex(b []byte) (*Index, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%s: rule index-json: not valid UTF-8", indexFile)
	}
	// b is Load's own and never changed: the names are views into it.
	p := &indexParser{s: unsafe.String(unsafe.SliceData(b), len(b))}
	idx, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("%s: rule index-json: %v (at byte %d)", indexFile, err, p.i)
	}
	for i, file := range idx.shards {
		if file == "" || !fs.ValidPath(file) {
			return nil, fmt.Errorf("%s: tensor %q: rule index-json: shard path %q is not a relative path inside the repo", indexFile, idx.names[p.firstOf[i]], file)
		}
	}
	return idx, nil
}

type indexParser struct {
	s       string
	i       int
	firstOf []int // per shard, its first entry
}

func (p *indexParser) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\r' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *indexParser) expect(c byte) error {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return fmt.Errorf("want %q", c)
	}
	p.i++
	return nil
}

func (p *indexParser) peek() byte {
	p.ws()
	if p.i >= len(p.s) {
		return 0
	}
	return p.s[p.i]
}

// str reads a string; with escapes it defers to encoding/json.
func (p *indexParser) str() (string, error) {
	if err := p.expect('"'); err != nil {
		return "", err
	}
	start := p.i
	escaped := false
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '\\':
			escaped = true
			p.i += 2
			continue
		case c == '"':
			p.i++
			if !escaped {
				return p.s[start : p.i-1], nil
			}
			var out string
			if err := json.Unmarshal([]byte(p.s[start-1:p.i]), &out); err != nil {
				return "", err
			}
			return out, nil
		case c < 0x20:
			return "", fmt.Errorf("control character in string")
		}
		p.i++
	}
	return "", fmt.Errorf("unterminated string")
}

// skip passes over any JSON value and returns its text.
func (p *indexParser) skip() (string, error) {
	p.ws()
	start := p.i
	depth := 0
	for p.i < len(p.s) {
		switch c := p.s[p.i]; c {
		case '"':
			if _, err := p.str(); err != nil {
				return "", err
			}
			if depth == 0 {
				return p.s[start:p.i], nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return "", fmt.Errorf("unbalanced %q", c)
			}
			if depth == 0 {
				p.i++
				return p.s[start:p.i], nil
			}
		case ',', ' ', '\n', '\r', '\t', ':':
			if depth == 0 {
				return p.s[start:p.i], nil
			}
		}
		p.i++
	}
	if depth == 0 && p.i > start {
		return p.s[start:p.i], nil
	}
	return "", fmt.Errorf("unexpected end")
}

func (p *indexParser) object(each func(key string) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		k, err := p.str()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := each(k); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return fmt.Errorf("want ',' or '}'")
		}
	}
}

func (p *indexParser) parse() (*Index, error) {
	idx := &Index{}
	err := p.object(func(key string) error {
		switch key {
		case "weight_map":
			if idx.names != nil {
				return fmt.Errorf("weight_map appears twice")
			}
			// Each entry but the last ends in a ',' (names holding one
			// only make the count high; a one-byte count is a vector loop).
			n := strings.Count(p.s, ",") + 1
			idx.names, idx.shardOf = make([]string, 0, n), make([]uint32, 0, n)
			idx.table = newNameTable(n)
			shards := map[string]uint32{}
			return p.object(func(name string) error {
				if p.peek() != '"' {
					return fmt.Errorf("weight_map[%q] is not a string", name)
				}
				file, err := p.str()
				if err != nil {
					return err
				}
				k, ok := shards[file]
				if !ok {
					k = uint32(len(idx.shards))
					shards[file] = k
					idx.shards = append(idx.shards, file)
					p.firstOf = append(p.firstOf, len(idx.names))
				}
				if !idx.add(name, k) {
					return fmt.Errorf("tensor %q appears twice in weight_map", name)
				}
				return nil
			})
		case "metadata":
			raw, err := p.skip()
			if err != nil {
				return err
			}
			var md map[string]any
			if err := json.Unmarshal([]byte(raw), &md); err != nil {
				return fmt.Errorf("metadata: %v", err)
			}
			if v, ok := md["total_size"]; ok && v != nil {
				f, ok := v.(float64)
				if !ok || f < 0 {
					return fmt.Errorf("metadata.total_size: want a non-negative number")
				}
				n := uint64(f)
				idx.TotalSize = &n
			}
			return nil
		}
		_, err := p.skip()
		return err
	})
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("data after the JSON object")
	}
	if idx.names == nil {
		return nil, fmt.Errorf("no weight_map")
	}
	return idx, nil
}
