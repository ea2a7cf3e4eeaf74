package hub

import (
	"strings"
	"testing"
)

func TestParseSource(t *testing.T) {
	const ep = "http://127.0.0.1:9000"
	for in, want := range map[string]Spec{
		"org/name":                         {Kind: KindRepo, Endpoint: ep, Repo: "org/name"},
		"org/name@v1.0":                    {Kind: KindRepo, Endpoint: ep, Repo: "org/name", Rev: "v1.0"},
		"https://huggingface.co/org/name":  {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name"},
		"https://huggingface.co/org/name/": {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name"},
		// hf.co redirects to huggingface.co (dropping the token at the hop): go there
		"https://hf.co/org/name/tree/dev":                                            {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "dev"},
		"https://www.huggingface.co/org/name":                                        {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name"},
		"https://huggingface.co/org/name/tree/refs/pr/1":                             {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "refs/pr/1"},
		"https://huggingface.co/org/name/blob/refs/pr/12/model.safetensors":          {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "refs/pr/12", Path: "model.safetensors"},
		"https://huggingface.co/org/name/resolve/refs%2Fpr%2F3/a/b.safetensors":      {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "refs/pr/3", Path: "a/b.safetensors"},
		"https://huggingface.co/org/name/blob/refs/convert/parquet/x.safetensors":    {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "refs/convert/parquet", Path: "x.safetensors"},
		"https://huggingface.co/org/name/blob/main/model-00001-of-00002.safetensors": {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "main", Path: "model-00001-of-00002.safetensors"},
		"https://huggingface.co/org/name/resolve/abc123/sub/dir/x.safetensors":       {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "abc123", Path: "sub/dir/x.safetensors"},
		"http://127.0.0.1:9000/org/name":                                             {Kind: KindRepo, Endpoint: ep, Repo: "org/name"},
		"http://127.0.0.1:9000/org/name/tree/main":                                   {Kind: KindRepo, Endpoint: ep, Repo: "org/name", Rev: "main"},
		"http://mirror.example:81/org/name/resolve/main/a.safetensors":               {Kind: KindRepoFile, Endpoint: "http://mirror.example:81", Repo: "org/name", Rev: "main", Path: "a.safetensors"},
		"https://files.example/some/model.safetensors":                               {Kind: KindURL, URL: "https://files.example/some/model.safetensors"},
		// one file at the top of the endpoint's own host: no repo path, so a plain URL
		"http://127.0.0.1:9000/model.safetensors": {Kind: KindURL, URL: "http://127.0.0.1:9000/model.safetensors"},
	} {
		got, err := ParseSource(in, ep)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", in, got, want)
		}
	}
	for _, bad := range []string{"justaname", "a/b/c", "../x", "org/..", "ftp://huggingface.co/a/b", "https://huggingface.co/org", "https://files.example/page.html", "https://huggingface.co/org/name/commits/main", "org/na me"} {
		if s, err := ParseSource(bad, ep); err == nil {
			t.Errorf("%q accepted as %+v", bad, s)
		}
	}
	// Each refused with the reason a person needs.
	for bad, why := range map[string]string{
		"https://huggingface.co/datasets/squad":              "a dataset repo, not a model",
		"https://huggingface.co/datasets/org/name":           "a dataset repo, not a model",
		"https://huggingface.co/spaces/org/name":             "a space repo, not a model",
		"https://huggingface.co/org/name/tree/main/sub/fold": "a folder of the repo (sub/fold)",
	} {
		if _, err := ParseSource(bad, ep); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want %q", bad, err, why)
		}
	}
	if s, _ := ParseSource("org/name", ""); s.Endpoint != DefaultEndpoint {
		t.Errorf("default endpoint %q", s.Endpoint)
	}
}

func TestContentRangeAndLink(t *testing.T) {
	if a, b, n, ok := parseContentRange("bytes 0-99/1000"); !ok || a != 0 || b != 99 || n != 1000 {
		t.Error("content-range")
	}
	if _, _, n, ok := parseContentRange("bytes 5-9/*"); !ok || n != -1 {
		t.Error("unknown total")
	}
	for _, bad := range []string{"", "bytes */100", "items 0-1/2", "bytes a-b/c"} {
		if _, _, _, ok := parseContentRange(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	got := nextLink(`<https://h/api/models/a/b/tree/main?recursive=true&cursor=abc>; rel="next"`, "https://h/api/models/a/b/tree/main?recursive=true")
	if got != "https://h/api/models/a/b/tree/main?recursive=true&cursor=abc" {
		t.Errorf("next %q", got)
	}
	if nextLink(`</x>; rel="prev"`, "https://h/") != "" {
		t.Error("prev taken as next")
	}
	if nextLink(`</p2>; rel="next"`, "http://h:1/api/x") != "http://h:1/p2" {
		t.Error("relative next")
	}
}
