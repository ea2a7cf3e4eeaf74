package safetensors

import (
	"errors"
	"testing"
)

// A tensor name holding a control character (C0, DEL, C1) is a FormatError
// naming the rule, the tensor and the character: printed, it would forge
// lines or escape sequences in the terminal.
func TestControlCharacterNames(t *testing.T) {
	for js, want := range map[string]string{
		`"a\nb"`:            "U+000A at byte 1",
		`"\u0000x"`:         "U+0000 at byte 0",
		`"x.\u001b[2Jy"`:    "U+001B at byte 2",
		`"x\ty"`:            "U+0009 at byte 1",
		"\"w\x7f\"":         "U+007F at byte 1",
		`"éé\u009b31m"`:     "U+009B at byte 4",
		`"model.\r.weight"`: "U+000D at byte 6",
	} {
		b := raw(`{"ok":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},`+js+`:{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2)
		_, err := Parse("names.safetensors", b)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Rule != RuleNameControl || fe.Tensor == "" || fe.File != "names.safetensors" {
			t.Errorf("%s: %v", js, err)
			continue
		}
		if got := fe.Msg; !contains(got, want) {
			t.Errorf("%s: %q lacks %q", js, got, want)
		}
	}
	// Printable names outside ASCII are fine.
	b := raw(`{"модель.层.0.weight":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1)
	if _, err := Parse("ok.safetensors", b); err != nil {
		t.Errorf("a printable UTF-8 name refused: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
