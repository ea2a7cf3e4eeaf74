package scheme

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// refFnmatch is Python's fnmatch.fnmatchcase written the way CPython does it:
// fnmatch.translate's regular expression (ported from Lib/fnmatch.py, 3.11),
// then a full match. It is the naive per-pattern reference for the compiled
// lists; it shares no code with match.go.
func refFnmatch(pat, name string) bool {
	re, ok := refCache.Load(pat)
	if !ok {
		re, _ = refCache.LoadOrStore(pat, regexp.MustCompile(refTranslate(pat)))
	}
	return re.(*regexp.Regexp).MatchString(name)
}

var refCache sync.Map // pattern → its translation, compiled

func refTranslate(pat string) string {
	p := []rune(pat)
	n := len(p)
	var res strings.Builder
	star := false
	find := func(c rune, from, to int) int {
		for k := from; k < to && k < n; k++ {
			if p[k] == c {
				return k
			}
		}
		return -1
	}
	for i := 0; i < n; {
		c := p[i]
		i++
		if c == '*' {
			if !star {
				res.WriteString(`.*`)
			}
			star = true
			continue
		}
		star = false
		switch c {
		case '?':
			res.WriteString(`.`)
		case '[':
			j := i
			if j < n && p[j] == '!' {
				j++
			}
			if j < n && p[j] == ']' {
				j++
			}
			for j < n && p[j] != ']' {
				j++
			}
			if j >= n {
				res.WriteString(`\[`)
				continue
			}
			stuff := string(p[i:j])
			if !strings.Contains(stuff, "-") {
				stuff = strings.ReplaceAll(stuff, `\`, `\\`)
			} else {
				var chunks [][]rune
				k := i + 1
				if p[i] == '!' {
					k = i + 2
				}
				for {
					k = find('-', k, j)
					if k < 0 {
						break
					}
					chunks = append(chunks, p[i:k])
					i = k + 1
					k = k + 3
				}
				if chunk := p[i:j]; len(chunk) > 0 {
					chunks = append(chunks, chunk)
				} else {
					chunks[len(chunks)-1] = append(append([]rune{}, chunks[len(chunks)-1]...), '-')
				}
				for k := len(chunks) - 1; k > 0; k-- {
					a, b := chunks[k-1], chunks[k]
					if a[len(a)-1] > b[0] {
						chunks[k-1] = append(append([]rune{}, a[:len(a)-1]...), b[1:]...)
						chunks = append(chunks[:k], chunks[k+1:]...)
					}
				}
				var parts []string
				for _, ch := range chunks {
					parts = append(parts, strings.ReplaceAll(strings.ReplaceAll(string(ch), `\`, `\\`), "-", `\-`))
				}
				stuff = strings.Join(parts, "-")
			}
			// Go's classes have no set operations; '[' and ':' in a class
			// are escaped so "[:" is not read as a POSIX class.
			stuff = strings.NewReplacer("[", `\[`, ":", `\:`).Replace(stuff)
			i = j + 1
			switch {
			case stuff == "":
				res.WriteString(`[^\x00-\x{10FFFF}]`) // Python's (?!): never
			case stuff == "!":
				res.WriteString(`.`)
			default:
				if stuff[0] == '!' {
					stuff = "^" + stuff[1:]
				} else if stuff[0] == '^' {
					stuff = `\` + stuff
				}
				res.WriteString("[" + stuff + "]")
			}
		default:
			res.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return `(?s)\A(?:` + res.String() + `)\z`
}

// refFirst is the loop match.go replaces: every entry in turn, the first
// that matches, as each producer's syntax reads it.
func refFirst(entries []string, syn listSyntax, name string, linear bool) int {
	for i, e := range entries {
		var ok bool
		switch syn {
		case syntaxFnmatch:
			ok = refFnmatch(e, name)
		case syntaxCT:
			if p, isRe := strings.CutPrefix(e, "re:"); isRe {
				// Python's re.match: a match that starts at the first character.
				re, err := regexp.Compile(p)
				loc := []int(nil)
				if err == nil {
					loc = re.FindStringIndex(name)
				}
				ok = loc != nil && loc[0] == 0
			} else if e == "Linear" || e == "QuantLinear" || e == "nn.Linear" {
				ok = linear
			} else {
				ok = name == e || strings.HasSuffix(name, "."+e)
			}
		case syntaxNotConvert:
			ok = name == e || strings.HasSuffix(name, "."+e) || strings.HasPrefix(name, e+".") ||
				(strings.ContainsAny(e, "*?[") && (refFnmatch(e, name) || refFnmatch(e+".*", name)))
		}
		if ok {
			return i
		}
	}
	return -1
}

// deepseekExclude is nvidia/DeepSeek-R1-FP4's exclude_modules as seed 004
// describes it: 245 entries.
func deepseekExclude() []string {
	var ex []string
	for l := range 61 {
		ex = append(ex, fmt.Sprintf("model.layers.%d.self_attn*", l))
	}
	for l := 3; l < 61; l++ {
		ex = append(ex, fmt.Sprintf("model.layers.%d.mlp.gate", l))
	}
	for l := range 61 {
		ex = append(ex, fmt.Sprintf("model.layers.%d.input_layernorm", l), fmt.Sprintf("model.layers.%d.post_attention_layernorm", l))
	}
	return append(ex, "model.norm", "model.embed_tokens", "lm_head", "model.layers.61*")
}

func deepseekModules() []string {
	names := []string{"model.embed_tokens", "model.norm", "lm_head"}
	for l := 0; l <= 61; l += 7 {
		for _, m := range []string{"self_attn.q_a_proj", "self_attn.kv_b_proj", "input_layernorm", "mlp.gate", "mlp.gate_proj", "mlp.shared_experts.up_proj", "mlp.experts.17.down_proj"} {
			names = append(names, fmt.Sprintf("model.layers.%d.%s", l, m))
		}
	}
	return names
}

func TestDeepSeekExcludeList(t *testing.T) {
	s := &Scheme{Method: "modelopt", ExcludeModules: deepseekExclude()}
	if len(s.ExcludeModules) != 245 {
		t.Fatalf("%d entries, want 245", len(s.ExcludeModules))
	}
	for name, want := range map[string]string{
		"model.layers.5.self_attn.kv_a_proj_with_mqa": "model.layers.5.self_attn*",
		"model.layers.5.mlp.gate":                     "model.layers.5.mlp.gate",
		"model.layers.5.mlp.gate_proj":                "",
		"model.layers.2.mlp.gate":                     "",
		"model.layers.61.mlp.experts.3.up_proj":       "model.layers.61*",
		"model.layers.61.self_attn.o_proj":            "model.layers.61*",
		"model.layers.60.mlp.experts.255.down_proj":   "",
		"model.layers.6.self_attn":                    "model.layers.6.self_attn*",
		"model.layers.6.self_attn_x.y.z":              "model.layers.6.self_attn*", // fnmatch: '*' takes any run, dots too
		"model.layers.600.self_attn.o_proj":           "",                          // neither "model.layers.6.self_attn*" nor "model.layers.61*"
		"lm_head":                                     "lm_head",
		"model.lm_head":                               "",
	} {
		if got := s.ExcludedBy(name); got != want {
			t.Errorf("ExcludedBy(%q) = %q, want %q", name, got, want)
		}
	}
}

// genPattern draws a pattern over a small alphabet so that metacharacters,
// sets, ranges and dots meet often, or one shaped like the real lists.
func genPattern(r *rand.Rand, names []string) string {
	const alpha = "ab.1*?[]!-\\^"
	switch r.IntN(5) {
	case 0:
		n := names[r.IntN(len(names))]
		return n[:r.IntN(len(n)+1)] + "*"
	case 1:
		n := names[r.IntN(len(names))]
		return "*" + n[r.IntN(len(n)+1):]
	case 2:
		return names[r.IntN(len(names))]
	}
	b := make([]byte, r.IntN(8))
	for i := range b {
		b[i] = alpha[r.IntN(len(alpha))]
	}
	return string(b)
}

func genName(r *rand.Rand, names []string) string {
	if r.IntN(2) == 0 {
		return names[r.IntN(len(names))]
	}
	const alpha = "ab.1*?[]!-\\^"
	b := make([]byte, r.IntN(7))
	for i := range b {
		b[i] = alpha[r.IntN(len(alpha))]
	}
	return string(b)
}

// The compiled lists answer what the naive loop answers (the same first
// entry) for every syntax, on many generated names × lists.
func TestPatternListAgreesWithLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	names := deepseekModules()
	lists := [][]string{deepseekExclude()}
	for range 300 {
		var l []string
		for range 1 + r.IntN(12) {
			p := genPattern(r, names)
			if r.IntN(6) == 0 {
				p = "re:" + regexp.QuoteMeta(p[:r.IntN(len(p)+1)]) + []string{"", ".*", "$", "|a", "(b"}[r.IntN(5)]
			}
			if r.IntN(20) == 0 {
				p = "Linear"
			}
			l = append(l, p)
		}
		lists = append(lists, l)
	}
	checked := 0
	for _, l := range lists {
		for _, syn := range []listSyntax{syntaxFnmatch, syntaxCT, syntaxNotConvert} {
			c := newPatternList(l, syn)
			for k := range 60 {
				name := genName(r, names)
				if k < len(names) && len(l) == 245 {
					name = names[k]
				}
				for _, linear := range []bool{false, true} {
					if got, want := c.first(name, linear), refFirst(l, syn, name, linear); got != want {
						t.Fatalf("syntax %d, list %q, name %q, linear %v: compiled says entry %d, the loop %d", syn, l, name, linear, got, want)
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d name × list checks", checked)
}

// The translation the reference uses is CPython's: testdata/fnmatch_cpython.json
// holds fnmatch.fnmatchcase answers computed by CPython 3.11 for tricky
// patterns (sets, reversed ranges, '!', '^', backslashes, unclosed '[').
func TestFnmatchAgreesWithCPython(t *testing.T) {
	b, err := os.ReadFile("testdata/fnmatch_cpython.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Pattern, Name string
		Match         bool
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 1000 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if got := newPatternList([]string{c.Pattern}, syntaxFnmatch).first(c.Name, false) == 0; got != c.Match {
			t.Errorf("fnmatch(%q, %q) = %v, CPython says %v", c.Name, c.Pattern, got, c.Match)
		}
		if got := refFnmatch(c.Pattern, c.Name); got != c.Match {
			t.Errorf("reference fnmatch(%q, %q) = %v, CPython says %v", c.Name, c.Pattern, got, c.Match)
		}
	}
}

// FuzzPatternList: a newline-separated list and a name; the compiled list
// and the naive loop agree in every syntax (seeds in testdata/fuzz).
func FuzzPatternList(f *testing.F) {
	f.Add("model.layers.1.self_attn*\nmodel.layers.61*\nlm_head", "model.layers.61.mlp.gate")
	f.Add("*.gate\n[!a-c]*\nre:.*proj$", "model.layers.0.mlp.gate")
	f.Fuzz(func(t *testing.T, list, name string) {
		if !utf8.ValidString(list) || !utf8.ValidString(name) || len(list) > 400 || len(name) > 100 {
			return // config files and headers are JSON: valid UTF-8
		}
		entries := strings.Split(list, "\n")
		for _, syn := range []listSyntax{syntaxFnmatch, syntaxCT, syntaxNotConvert} {
			for _, linear := range []bool{false, true} {
				if got, want := newPatternList(entries, syn).first(name, linear), refFirst(entries, syn, name, linear); got != want {
					t.Fatalf("syntax %d, list %q, name %q: compiled says entry %d, the loop %d", syn, entries, name, got, want)
				}
			}
		}
	})
}

// BenchmarkExcludedBy: the DeepSeek-R1-FP4 list against its module names,
// compiled against the per-pattern loop it replaced.
func BenchmarkExcludedBy(b *testing.B) {
	ex := deepseekExclude()
	var names []string
	for l := range 62 {
		for e := range 16 {
			names = append(names, fmt.Sprintf("model.layers.%d.mlp.experts.%d.gate_proj", l, e))
		}
		names = append(names, fmt.Sprintf("model.layers.%d.self_attn.o_proj", l))
	}
	b.Run("compiled", func(b *testing.B) {
		s := &Scheme{Method: "modelopt", ExcludeModules: ex}
		for b.Loop() {
			for _, n := range names {
				s.ExcludedBy(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(names)), "ns/name")
	})
	b.Run("loop", func(b *testing.B) {
		for b.Loop() {
			for _, n := range names {
				for _, e := range ex {
					if ok, _ := path.Match(e, n); ok { // what Declared and ExcludedBy did per module
						break
					}
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(names)), "ns/name")
	})
}
