package numeric

// E5M2 (float8_e5m2): bias 15, IEEE-like with ±inf and NaNs, max 57344.
var e5m2 = minifloat{expBits: 5, manBits: 2, bias: 15, style: styleIEEE, maxCode: 0x7B, nanCode: 0x7F}

var e5m2Table = e5m2.table()

// E5M2ToFloat32 decodes one float8_e5m2 code.
func E5M2ToFloat32(c byte) float32 { return e5m2.decode(c) }

// Float32ToE5M2 encodes with round-to-nearest-even, saturating to ±57344
// (infinities too: the saturating cast quantizers use).
func Float32ToE5M2(x float32) byte { return e5m2.encode(x) }

// DecodeE5M2 decodes len(src) codes into dst[:len(src)].
func DecodeE5M2(dst []float32, src []byte) { decodeTable(&e5m2Table, dst, src) }

// E5M2Max is the largest finite e5m2 value.
const E5M2Max = 57344
