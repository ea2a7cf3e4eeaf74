package hub

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// SourceKind tells which of the SOURCE forms a string is.
type SourceKind int

const (
	KindRepo     SourceKind = iota // a model repo: ORG/NAME, https://hub/ORG/NAME[/tree/REV]
	KindRepoFile                   // one file of a repo: .../blob/REV/PATH or .../resolve/REV/PATH
	KindURL                        // any other http(s) URL of one .safetensors file
)

// Spec is a parsed remote SOURCE.
type Spec struct {
	Kind     SourceKind
	Endpoint string // the hub, for KindRepo and KindRepoFile
	Repo     string // ORG/NAME
	Rev      string // "" means main
	Path     string // the file, for KindRepoFile
	URL      string // for KindURL
}

// OfficialHosts are the Hugging Face hub's own hosts: a token given for
// the hub may go to them (callers decide where else).
var OfficialHosts = []string{"huggingface.co", "www.huggingface.co", "hf.co"}

// Host is the host (and port) a Spec's requests go to first: the URL's
// for KindURL, the endpoint's otherwise.
func (s Spec) Host() string {
	target := s.Endpoint
	if s.Kind == KindURL {
		target = s.URL
	}
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	return u.Host
}

// ParseSource reads a remote SOURCE against a default endpoint (used for
// the ORG/NAME form; a full URL names its own hub). A URL on the endpoint's
// host, or on huggingface.co / hf.co, is read with the hub's URL layout.
// Local paths are the caller's business: check them first.
func ParseSource(s, endpoint string) (Spec, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	endpoint = strings.TrimRight(endpoint, "/")
	if !strings.Contains(s, "://") {
		repo, rev, _ := strings.Cut(s, "@")
		if err := checkRepoID(repo); err != nil {
			return Spec{}, fmt.Errorf("%s: not a local path, and %v", s, err)
		}
		return Spec{Kind: KindRepo, Endpoint: endpoint, Repo: repo, Rev: rev}, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Spec{}, fmt.Errorf("%s: not an http(s) URL", s)
	}
	ep, _ := url.Parse(endpoint)
	onHub := u.Host == ep.Host || u.Host == "huggingface.co" || u.Host == "hf.co" || u.Host == "www.huggingface.co"
	if !onHub && hubLayout(u.Path) {
		onHub = true // another hub (a mirror, a local one): its own host is the endpoint
	}
	if !onHub {
		if !strings.HasSuffix(u.Path, ".safetensors") {
			return Spec{}, fmt.Errorf("%s: a URL off the hub must name one .safetensors file (if %s is a hub, give --endpoint %s://%s, or the repo's /tree/main URL)", s, u.Host, u.Scheme, u.Host)
		}
		return Spec{Kind: KindURL, URL: s}, nil
	}
	hubURL := u.Scheme + "://" + u.Host
	switch {
	case u.Host == ep.Host:
		hubURL = endpoint // keep a path prefix the endpoint may have
	case slices.Contains(OfficialHosts, u.Host):
		// hf.co and www.huggingface.co redirect to huggingface.co, and a
		// redirect to another host drops the token: go there directly
		hubURL = DefaultEndpoint
	}
	p := strings.Trim(strings.TrimPrefix(u.EscapedPath(), strings.TrimRight(endpointPath(hubURL), "/")), "/")
	parts := strings.Split(p, "/")
	for i, part := range parts {
		if v, err := url.PathUnescape(part); err == nil {
			parts[i] = v
		}
	}
	if len(parts) > 0 && parts[0] == "models" {
		parts = parts[1:]
	}
	if len(parts) > 0 {
		switch parts[0] {
		case "datasets", "spaces", "buckets":
			return Spec{}, fmt.Errorf("%s: a %s repo, not a model: quantscope reads model repos (https://HUB/ORG/NAME)", s, strings.TrimSuffix(parts[0], "s"))
		}
	}
	if len(parts) < 2 {
		if strings.HasSuffix(u.Path, ".safetensors") && !slices.Contains(OfficialHosts, u.Host) {
			return Spec{Kind: KindURL, URL: s}, nil // one file at the top of the endpoint's host: no repo path, a plain URL
		}
		return Spec{}, fmt.Errorf("%s: want https://HUB/ORG/NAME", s)
	}
	spec := Spec{Kind: KindRepo, Endpoint: hubURL, Repo: parts[0] + "/" + parts[1]}
	if err := checkRepoID(spec.Repo); err != nil {
		return Spec{}, fmt.Errorf("%s: %v", s, err)
	}
	rest := parts[2:]
	if len(rest) >= 2 {
		// a special ref spans three path elements unencoded in the hub's
		// web routes: refs/pr/N, refs/convert/NAME
		if n := specialRef(rest[1:]); n > 1 {
			rest = append([]string{rest[0], strings.Join(rest[1:1+n], "/")}, rest[1+n:]...)
		}
	}
	switch {
	case len(rest) == 0:
	case rest[0] == "tree" && len(rest) == 2:
		spec.Rev = rest[1]
	case rest[0] == "tree" && len(rest) > 2:
		return Spec{}, fmt.Errorf("%s: a folder of the repo (%s): quantscope reads a whole repo (its config.json and every shard at the root), or one file (/blob/REV/PATH)", s, strings.Join(rest[2:], "/"))
	case (rest[0] == "blob" || rest[0] == "resolve") && len(rest) >= 3:
		spec.Kind, spec.Rev, spec.Path = KindRepoFile, rest[1], strings.Join(rest[2:], "/")
	default:
		return Spec{}, fmt.Errorf("%s: want ORG/NAME, /tree/REV, /blob/REV/PATH or /resolve/REV/PATH after the hub", s)
	}
	return spec, nil
}

// specialRef is how many path elements the revision starting parts takes:
// 3 for refs/pr/N and refs/convert/NAME, else 1.
func specialRef(parts []string) int {
	if len(parts) >= 3 && parts[0] == "refs" && (parts[1] == "pr" || parts[1] == "convert") && parts[2] != "" {
		return 3
	}
	return 1
}

func endpointPath(e string) string {
	u, err := url.Parse(e)
	if err != nil {
		return ""
	}
	return u.Path
}

func checkRepoID(id string) error {
	org, name, ok := strings.Cut(id, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not ORG/NAME", id)
	}
	for _, part := range []string{org, name} {
		if part == "." || part == ".." {
			return fmt.Errorf("%q is not ORG/NAME", id)
		}
		for _, r := range part {
			if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return fmt.Errorf("%q is not ORG/NAME: character %q", id, r)
			}
		}
	}
	return nil
}

// hubLayout reports whether a URL path reads /ORG/NAME/{tree,blob,resolve}/REV/...
func hubLayout(p string) bool {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) < 4 {
		return false
	}
	switch parts[2] {
	case "tree", "blob", "resolve":
		return checkRepoID(parts[0]+"/"+parts[1]) == nil
	}
	return false
}

// OpenSpec builds a client for a parsed SOURCE and opens it: a repo, one file
// of a repo, or a plain URL. revision, when set, overrides the spec's. The
// options come before the spec's own endpoint, which wins.
func OpenSpec(ctx context.Context, spec Spec, revision string, opts ...Option) (Source, error) {
	if spec.Endpoint != "" {
		opts = append(opts, WithEndpoint(spec.Endpoint))
	}
	c, err := NewClient(opts...)
	if err != nil {
		return nil, err
	}
	rev := spec.Rev
	if revision != "" {
		rev = revision
	}
	switch spec.Kind {
	case KindRepoFile:
		return c.OpenRepoFile(ctx, spec.Repo, rev, spec.Path), nil
	case KindURL:
		return c.OpenURL(ctx, spec.URL), nil
	}
	return c.OpenRepo(ctx, spec.Repo, rev), nil
}
