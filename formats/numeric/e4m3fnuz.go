package numeric

// E4M3FNUZ (float8_e4m3fnuz): bias 8, no inf, no −0, the single NaN 0x80, max 240.
var e4m3fnuz = minifloat{expBits: 4, manBits: 3, bias: 8, style: styleFNUZ, maxCode: 0x7F, nanCode: 0x80}

var e4m3fnuzTable = e4m3fnuz.table()

// E4M3FNUZToFloat32 decodes one float8_e4m3fnuz code.
func E4M3FNUZToFloat32(c byte) float32 { return e4m3fnuz.decode(c) }

// Float32ToE4M3FNUZ encodes with round-to-nearest-even, saturating to ±240; −0 becomes 0.
func Float32ToE4M3FNUZ(x float32) byte { return e4m3fnuz.encode(x) }

// DecodeE4M3FNUZ decodes len(src) codes into dst[:len(src)].
func DecodeE4M3FNUZ(dst []float32, src []byte) { decodeTable(&e4m3fnuzTable, dst, src) }
