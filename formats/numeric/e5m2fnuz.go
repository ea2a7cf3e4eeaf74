package numeric

// E5M2FNUZ (float8_e5m2fnuz): bias 16, no inf, no −0, the single NaN 0x80, max 57344.
var e5m2fnuz = minifloat{expBits: 5, manBits: 2, bias: 16, style: styleFNUZ, maxCode: 0x7F, nanCode: 0x80}

var e5m2fnuzTable = e5m2fnuz.table()

// E5M2FNUZToFloat32 decodes one float8_e5m2fnuz code.
func E5M2FNUZToFloat32(c byte) float32 { return e5m2fnuz.decode(c) }

// Float32ToE5M2FNUZ encodes with round-to-nearest-even, saturating to ±57344; −0 becomes 0.
func Float32ToE5M2FNUZ(x float32) byte { return e5m2fnuz.encode(x) }

// DecodeE5M2FNUZ decodes len(src) codes into dst[:len(src)].
func DecodeE5M2FNUZ(dst []float32, src []byte) { decodeTable(&e5m2fnuzTable, dst, src) }
