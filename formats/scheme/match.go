package scheme

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// A patternList is one exclude / ignore / target list compiled once, so that
// matching a module name costs a few hash lookups whatever the number of
// entries in the common shapes (a literal name, "prefix*", "*suffix", a dotted
// name or suffix, a class name), one combined regular expression for the "re:"
// entries and a loop only over the wildcards of any other shape.
//
// first returns the index of the first entry, in list order, that matches, or
// -1: the same answer as trying every entry in turn.
type patternList struct {
	exact              map[string]int // the whole name
	dotSuffix          map[string]int // the name ends with "." + entry (compressed-tensors, modules_to_not_convert)
	dotPrefix          map[string]int // the name starts with entry + "." (modules_to_not_convert)
	prefix, suffix     map[string]int // fnmatch "P*" / "*S" with a literal P / S
	prefixLen, suffixN []int          // the distinct lengths of those P and S
	linear             int            // the first class-name entry (Linear, ...), -1 when none
	res                []indexedRe    // "re:" entries that compile, in list order
	anyRe              *regexp.Regexp // all of res in one alternation, nil when res is empty
	globs              []indexedGlob  // every other fnmatch wildcard, in list order
}

type indexedRe struct {
	i  int
	re *regexp.Regexp
}

type indexedGlob struct {
	i int
	g glob
}

// listSyntax is how a producer's list is read.
type listSyntax int

const (
	// syntaxFnmatch: ModelOpt's exclude_modules, Python fnmatch wildcards.
	syntaxFnmatch listSyntax = iota
	// syntaxCT: compressed-tensors targets / ignore: "re:" + a regular
	// expression matched at the start of the name (Python's re.match), a
	// class name, or a module name / dotted name suffix.
	syntaxCT
	// syntaxNotConvert: modules_to_not_convert: a module name, a dotted
	// prefix or suffix of one, or an fnmatch wildcard (also matching the
	// submodules of what it names).
	syntaxNotConvert
)

func newPatternList(entries []string, syn listSyntax) *patternList {
	l := &patternList{linear: -1}
	var alts []string
	for i, e := range entries {
		switch syn {
		case syntaxFnmatch:
			l.addGlob(i, e)
		case syntaxCT:
			if p, ok := strings.CutPrefix(e, "re:"); ok {
				// Compiled alone first: a pattern that is invalid on its own
				// (an unbalanced ')' the wrapper would close) matches nothing.
				if _, err := regexp.Compile(p); err != nil {
					continue
				}
				if re, err := regexp.Compile(`^(?:` + p + `)`); err == nil {
					l.res = append(l.res, indexedRe{i, re})
					alts = append(alts, `(?:`+p+`)`)
				}
				continue
			}
			switch e {
			case "Linear", "QuantLinear", "nn.Linear":
				if l.linear < 0 {
					l.linear = i
				}
				continue
			}
			setFirst(&l.exact, e, i)
			setFirst(&l.dotSuffix, e, i)
		case syntaxNotConvert:
			setFirst(&l.exact, e, i)
			setFirst(&l.dotSuffix, e, i)
			setFirst(&l.dotPrefix, e, i)
			if strings.ContainsAny(e, "*?[") {
				l.addGlob(i, e)
				l.addGlob(i, e+".*")
			}
		}
	}
	if len(alts) > 0 {
		// Too large an alternation for the regexp package leaves anyRe nil:
		// then every entry is tried.
		l.anyRe, _ = regexp.Compile(`^(?:` + strings.Join(alts, "|") + `)`)
	}
	return l
}

func setFirst(m *map[string]int, k string, i int) {
	if *m == nil {
		*m = map[string]int{}
	}
	if _, ok := (*m)[k]; !ok {
		(*m)[k] = i
	}
}

func addLen(lens []int, n int) []int {
	for _, x := range lens {
		if x == n {
			return lens
		}
	}
	return append(lens, n)
}

// addGlob files one fnmatch pattern under the cheapest test that decides it
// exactly.
func (l *patternList) addGlob(i int, p string) {
	p = collapseStars(p)
	meta := func(s string) bool { return strings.ContainsAny(s, "*?[") }
	switch {
	case !meta(p):
		setFirst(&l.exact, p, i)
	case strings.HasSuffix(p, "*") && !meta(p[:len(p)-1]):
		setFirst(&l.prefix, p[:len(p)-1], i)
		l.prefixLen = addLen(l.prefixLen, len(p)-1)
	case strings.HasPrefix(p, "*") && !meta(p[1:]):
		setFirst(&l.suffix, p[1:], i)
		l.suffixN = addLen(l.suffixN, len(p)-1)
	default:
		l.globs = append(l.globs, indexedGlob{i, compileGlob(p)})
	}
}

// collapseStars turns runs of '*' into one: the same language, and it keeps
// "P**" in the prefix shape.
func collapseStars(p string) string {
	if !strings.Contains(p, "**") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '*' && i > 0 && p[i-1] == '*' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// names reports whether an entry is name itself or a dotted suffix of it
// (not a pattern, not a class).
func (l *patternList) names(name string) bool {
	if _, ok := l.exact[name]; ok {
		return true
	}
	for j := 0; j < len(name); j++ {
		if name[j] == '.' {
			if _, ok := l.dotSuffix[name[j+1:]]; ok {
				return true
			}
		}
	}
	return false
}

// first is the index of the first entry that matches name, or -1. linear
// says whether class-name entries (Linear) apply to this module.
func (l *patternList) first(name string, linear bool) int {
	best := -1
	better := func(i int) {
		if best < 0 || i < best {
			best = i
		}
	}
	if i, ok := l.exact[name]; ok {
		better(i)
	}
	if linear && l.linear >= 0 {
		better(l.linear)
	}
	if l.dotSuffix != nil || l.dotPrefix != nil {
		for j := 0; j < len(name); j++ {
			if name[j] != '.' {
				continue
			}
			if i, ok := l.dotSuffix[name[j+1:]]; ok {
				better(i)
			}
			if i, ok := l.dotPrefix[name[:j]]; ok {
				better(i)
			}
		}
	}
	for _, n := range l.prefixLen {
		if n <= len(name) {
			if i, ok := l.prefix[name[:n]]; ok {
				better(i)
			}
		}
	}
	for _, n := range l.suffixN {
		if n <= len(name) {
			if i, ok := l.suffix[name[len(name)-n:]]; ok {
				better(i)
			}
		}
	}
	for _, g := range l.globs {
		if best >= 0 && g.i >= best {
			break
		}
		if g.g.match(name) {
			better(g.i)
			break
		}
	}
	if len(l.res) > 0 && (best < 0 || l.res[0].i < best) && (l.anyRe == nil || l.anyRe.MatchString(name)) {
		for _, r := range l.res {
			if best >= 0 && r.i >= best {
				break
			}
			if r.re.MatchString(name) {
				better(r.i)
				break
			}
		}
	}
	return best
}

// A glob is one Python fnmatch pattern (fnmatch.fnmatchcase): '*' matches
// any run of characters (dots included), '?' any one character, "[...]" one
// character of a set ("[!...]" not of it, ranges "a-z", a reversed range
// matches nothing, a ']' first is literal, an unclosed '[' is a literal '['),
// and everything else, backslash included, itself.
type glob []globTok

type globTok struct {
	kind   byte // 'c' a literal rune, '?' any rune, '*' any run, '[' a set
	r      rune
	neg    bool
	ranges []rune // pairs lo, hi
}

func compileGlob(p string) glob {
	var g glob
	for i := 0; i < len(p); {
		switch p[i] {
		case '*':
			g = append(g, globTok{kind: '*'})
			i++
			continue
		case '?':
			g = append(g, globTok{kind: '?'})
			i++
			continue
		case '[':
			if t, n, ok := compileSet(p[i+1:]); ok {
				g = append(g, t)
				i += 1 + n
				continue
			}
		}
		r, n := utf8.DecodeRuneInString(p[i:])
		g = append(g, globTok{kind: 'c', r: r})
		i += n
	}
	return g
}

// compileSet reads a set after its '[': the token and the bytes it used
// (through the closing ']'), or ok false when no ']' closes it.
func compileSet(s string) (t globTok, n int, ok bool) {
	t.kind = '['
	j := 0
	if j < len(s) && s[j] == '!' {
		t.neg = true
		j++
	}
	for k := j; k < len(s); {
		r, w := utf8.DecodeRuneInString(s[k:])
		if r == ']' && k > j {
			t.ranges = setRanges(s[j:k])
			return t, k + 1, true
		}
		k += w
	}
	return t, 0, false
}

// setRanges turns a set's body into lo, hi pairs: "a-z" is a range (dropped
// when reversed), a '-' first or last, or right after a range, is itself.
func setRanges(body string) []rune {
	rs := []rune(body)
	var out []rune
	for a := 0; a < len(rs); {
		if a+2 < len(rs) && rs[a+1] == '-' {
			if rs[a] <= rs[a+2] {
				out = append(out, rs[a], rs[a+2])
			}
			a += 3
			continue
		}
		out = append(out, rs[a], rs[a])
		a++
	}
	return out
}

func (t *globTok) in(r rune) bool {
	hit := false
	for k := 0; k+1 < len(t.ranges); k += 2 {
		if t.ranges[k] <= r && r <= t.ranges[k+1] {
			hit = true
			break
		}
	}
	return hit != t.neg
}

// match is the classic wildcard walk: on a mismatch, go back to the last '*'
// and let it take one more character. Linear in name × pattern at worst.
func (g glob) match(name string) bool {
	pi, ni := 0, 0
	star, starN := -1, 0
	for ni < len(name) {
		if pi < len(g) {
			t := &g[pi]
			if t.kind == '*' {
				star, starN = pi, ni
				pi++
				continue
			}
			r, w := utf8.DecodeRuneInString(name[ni:])
			ok := false
			switch t.kind {
			case '?':
				ok = true
			case 'c':
				ok = t.r == r
			case '[':
				ok = t.in(r)
			}
			if ok {
				pi++
				ni += w
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, w := utf8.DecodeRuneInString(name[starN:])
		starN += w
		pi, ni = star+1, starN
	}
	for pi < len(g) && g[pi].kind == '*' {
		pi++
	}
	return pi == len(g)
}

// compiledLists are a Scheme's lists compiled, with the slices they were
// compiled from: a list reassigned after the first match is compiled again.
// (Changing a list's entries in place after matching began is not noticed.)
type compiledLists struct {
	method          string
	exclude, ignore []string
	groups          []ConfigGroup
	groupTargets    [][]string
	excludeL        *patternList
	ignoreL         *patternList
	groupL          []*patternList
}

func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (c *compiledLists) current(s *Scheme) bool {
	if c.method != s.Method || !sameSlice(c.exclude, s.ExcludeModules) || !sameSlice(c.ignore, s.Ignore) || !sameSlice(c.groups, s.Groups) {
		return false
	}
	for i := range s.Groups {
		if !sameSlice(c.groupTargets[i], s.Groups[i].Targets) {
			return false
		}
	}
	return true
}

// compiled returns the scheme's lists compiled, compiling them on first use.
// Safe for concurrent use.
func (s *Scheme) compiled() *compiledLists {
	if c, _ := s.lists.Load().(*compiledLists); c != nil && c.current(s) {
		return c
	}
	c := &compiledLists{method: s.Method, exclude: s.ExcludeModules, ignore: s.Ignore, groups: s.Groups}
	c.excludeL = newPatternList(s.ExcludeModules, syntaxFnmatch)
	syn := syntaxNotConvert
	if s.Method == "compressed-tensors" {
		syn = syntaxCT
	}
	c.ignoreL = newPatternList(s.Ignore, syn)
	for _, g := range s.Groups {
		c.groupTargets = append(c.groupTargets, g.Targets)
		c.groupL = append(c.groupL, newPatternList(g.Targets, syntaxCT))
	}
	s.lists.Store(c)
	return c
}
