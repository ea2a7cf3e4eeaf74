package checkpoint

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// parseIndex reads model.safetensors.index.json. A large model's index holds
// hundreds of thousands of names with a few dozen distinct shard names, so
// it is read by hand: names are looked at in place, shard names interned,
// and only metadata (small) goes through encoding/json. The Index keeps
// nothing of b (see Index), so the caller may drop it.
func parseIndex(b []byte) (*Index, error) { return parseIndexEach(b, nil) }

// parseIndexEach is parseIndex that also calls each with every weight_map
// entry, in the file's order: how the names of entries are had again.
func parseIndexEach(b []byte, each func(name, shard string)) (*Index, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%s: rule index-json: not valid UTF-8", indexFile)
	}
	// b is not changed while it is parsed: the names are views into it.
	p := &indexParser{s: unsafe.String(unsafe.SliceData(b), len(b)), each: each}
	idx, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("%s: rule index-json: %v (at byte %d)", indexFile, err, p.i)
	}
	for i, file := range idx.shards {
		if file == "" || !fs.ValidPath(file) {
			return nil, fmt.Errorf("%s: tensor %q: rule index-json: shard path %q is not a relative path inside the repo", indexFile, idx.names[p.firstOf[i]], file)
		}
	}
	idx.seal()
	return idx, nil
}

type indexParser struct {
	s       string
	i       int
	firstOf []int                    // per shard, its first entry
	each    func(name, shard string) // nil, or told every entry
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
		if p.i = safetensors.PlainRun(p.s, p.i); p.i == len(p.s) {
			break
		}
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

// minEntryBytes is the least a weight_map entry is assumed to take when the
// parser pre-sizes its arrays. The hub's take 60 to 100 bytes (a name, a
// shard path like "model-00001-of-00009.safetensors", quotes and
// punctuation); a file of shorter ones only grows the arrays as it goes.
const minEntryBytes = 32

// entriesAhead guesses, at the start of weight_map, how many entries it
// holds, to pre-size the arrays and the table: the commas from here on
// (each entry but the last ends in one; a one-byte count is a vector loop),
// at most one entry per minEntryBytes of what is left. Commas inside
// strings or in what follows weight_map only make the count high, and the
// bound keeps the pre-size (about 44 bytes an entry) under 1.4 times the
// file's size however many there are.
func (p *indexParser) entriesAhead() int {
	rest := p.s[p.i:]
	return min(safetensors.CountByte(rest, ',')+1, len(rest)/minEntryBytes+1)
}

func (p *indexParser) parse() (*Index, error) {
	idx := &Index{}
	err := p.object(func(key string) error {
		switch key {
		case "weight_map":
			if idx.table != nil {
				return fmt.Errorf("weight_map appears twice")
			}
			n := p.entriesAhead()
			idx.hashes, idx.names, idx.shardOf = make([]uint64, 0, n), make([]string, 0, n), make([]uint32, 0, n)
			idx.table = newNameTable(n)
			shards := map[string]uint32{}
			lastFile, lastShard := "", ^uint32(0) // none yet
			return p.object(func(name string) error {
				if p.peek() != '"' {
					return fmt.Errorf("weight_map[%q] is not a string", name)
				}
				file, err := p.str()
				if err != nil {
					return err
				}
				// Neighbouring entries mostly share a shard: compare with
				// the last one before hashing the path.
				k := lastShard
				if file != lastFile || k == ^uint32(0) {
					var ok bool
					if k, ok = shards[file]; !ok {
						k = uint32(len(idx.shards))
						shards[file] = k
						// a copy: a view would keep the whole file alive
						idx.shards = append(idx.shards, strings.Clone(file))
						p.firstOf = append(p.firstOf, len(idx.names))
					}
					lastFile, lastShard = file, k
				}
				if !idx.add(name, k) {
					return fmt.Errorf("tensor %q appears twice in weight_map", name)
				}
				if p.each != nil {
					p.each(name, file)
				}
				return nil
			})
		case "metadata":
			raw, err := p.skip()
			if err != nil {
				return err
			}
			var md map[string]any // raw is a view of b, which Unmarshal only reads: no copy
			if err := json.Unmarshal(unsafe.Slice(unsafe.StringData(raw), len(raw)), &md); err != nil {
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
	if idx.table == nil {
		return nil, fmt.Errorf("no weight_map")
	}
	return idx, nil
}
