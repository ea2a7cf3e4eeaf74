package hub

import "testing"

func TestParseSource(t *testing.T) {
	const ep = "http://127.0.0.1:9000"
	for in, want := range map[string]Spec{
		"org/name":                         {Kind: KindRepo, Endpoint: ep, Repo: "org/name"},
		"org/name@v1.0":                    {Kind: KindRepo, Endpoint: ep, Repo: "org/name", Rev: "v1.0"},
		"https://huggingface.co/org/name":  {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name"},
		"https://huggingface.co/org/name/": {Kind: KindRepo, Endpoint: "https://huggingface.co", Repo: "org/name"},
		"https://hf.co/org/name/tree/dev":  {Kind: KindRepo, Endpoint: "https://hf.co", Repo: "org/name", Rev: "dev"},
		"https://huggingface.co/org/name/blob/main/model-00001-of-00002.safetensors": {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "main", Path: "model-00001-of-00002.safetensors"},
		"https://huggingface.co/org/name/resolve/abc123/sub/dir/x.safetensors":       {Kind: KindRepoFile, Endpoint: "https://huggingface.co", Repo: "org/name", Rev: "abc123", Path: "sub/dir/x.safetensors"},
		"http://127.0.0.1:9000/org/name":                                             {Kind: KindRepo, Endpoint: ep, Repo: "org/name"},
		"http://127.0.0.1:9000/org/name/tree/main":                                   {Kind: KindRepo, Endpoint: ep, Repo: "org/name", Rev: "main"},
		"http://mirror.example:81/org/name/resolve/main/a.safetensors":               {Kind: KindRepoFile, Endpoint: "http://mirror.example:81", Repo: "org/name", Rev: "main", Path: "a.safetensors"},
		"https://files.example/some/model.safetensors":                               {Kind: KindURL, URL: "https://files.example/some/model.safetensors"},
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
