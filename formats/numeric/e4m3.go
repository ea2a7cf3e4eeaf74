package numeric

// E4M3 (float8_e4m3fn): bias 7, no infinities, NaN is S.1111.111, max 448.
var e4m3 = minifloat{expBits: 4, manBits: 3, bias: 7, style: styleFN, maxCode: 0x7E, nanCode: 0x7F}

var e4m3Table = e4m3.table()

// E4M3ToFloat32 decodes one float8_e4m3fn code.
func E4M3ToFloat32(c byte) float32 { return e4m3.decode(c) }

// Float32ToE4M3 encodes with round-to-nearest-even, saturating to ±448.
func Float32ToE4M3(x float32) byte { return e4m3.encode(x) }

// DecodeE4M3 decodes len(src) codes into dst[:len(src)].
func DecodeE4M3(dst []float32, src []byte) { decodeTable(&e4m3Table, dst, src) }

// E4M3Max is the largest finite e4m3fn value.
const E4M3Max = 448
