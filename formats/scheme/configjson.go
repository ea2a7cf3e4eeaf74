package scheme

// The typed reader of config files: a decoded JSON object whose getters
// record the first mistake as a ConfigError naming the file and key path.

import (
	"encoding/json"
	"fmt"
)

// obj is a decoded JSON object with typed getters that record the first error.
type obj struct {
	m    map[string]any
	file string
	path string
	err  *ConfigError
}

func (o *obj) fail(key, msg string) {
	if o.err == nil {
		o.err = &ConfigError{File: o.file, Field: o.path + key, Msg: msg}
	}
}

func (o *obj) str(key string) string {
	v, ok := o.m[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		o.fail(key, fmt.Sprintf("want a string, found %s", jsonKind(v)))
	}
	return s
}

func (o *obj) integer(key string) int {
	v, ok := o.m[key]
	if !ok || v == nil {
		return 0
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		o.fail(key, fmt.Sprintf("want an integer, found %s", jsonKind(v)))
		return 0
	}
	return int(f)
}

func (o *obj) boolean(key string) (bool, bool) {
	v, ok := o.m[key]
	if !ok || v == nil {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		o.fail(key, fmt.Sprintf("want true or false, found %s", jsonKind(v)))
	}
	return b, ok
}

func (o *obj) strs(key string) []string {
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		o.fail(key, fmt.Sprintf("want a list of strings, found %s", jsonKind(v)))
		return nil
	}
	out := make([]string, 0, len(a))
	for _, x := range a {
		s, ok := x.(string)
		if !ok {
			o.fail(key, "want a list of strings, found "+jsonKind(x)+" in it")
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (o *obj) ints(key string) []int {
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		o.fail(key, "want a list of integers, found "+jsonKind(v))
		return nil
	}
	out := make([]int, 0, len(a))
	for _, x := range a {
		f, ok := x.(float64)
		if !ok || f != float64(int(f)) {
			o.fail(key, "want a list of integers")
			return nil
		}
		out = append(out, int(f))
	}
	return out
}

func (o *obj) sub(key string) *obj {
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		o.fail(key, "want an object, found "+jsonKind(v))
		return nil
	}
	return &obj{m: m, file: o.file, path: o.path + key + ".", err: nil}
}

// adopt carries a child's error up.
func (o *obj) adopt(c *obj) {
	if c != nil && c.err != nil && o.err == nil {
		o.err = c.err
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return "a value"
}

// maxConfigBytes bounds the config files read; real ones are a few KB to a few MB.
const maxConfigBytes = 64 << 20

func decodeObject(file string, b []byte) (*obj, error) {
	if len(b) > maxConfigBytes {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("%d bytes is larger than the %d-byte limit for a config file", len(b), maxConfigBytes)}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, &ConfigError{File: file, Msg: "not a JSON object: " + err.Error()}
	}
	if m == nil {
		return nil, &ConfigError{File: file, Msg: "not a JSON object: null"}
	}
	return &obj{m: m, file: file}, nil
}
