package safetensors

// DType is a safetensors element type as it is spelled in a header.
type DType uint8

// The 22 dtypes of the safetensors format. Their order carries no meaning.
const (
	Invalid DType = iota
	F4
	F6_E2M3
	F6_E3M2
	BOOL
	U8
	I8
	F8_E5M2
	F8_E4M3
	F8_E8M0
	F8_E4M3FNUZ
	F8_E5M2FNUZ
	I16
	U16
	F16
	BF16
	I32
	U32
	F32
	I64
	U64
	F64
	C64
	numDTypes
)

var dtypeNames = [numDTypes]string{
	Invalid: "", F4: "F4", F6_E2M3: "F6_E2M3", F6_E3M2: "F6_E3M2", BOOL: "BOOL",
	U8: "U8", I8: "I8", F8_E5M2: "F8_E5M2", F8_E4M3: "F8_E4M3", F8_E8M0: "F8_E8M0",
	F8_E4M3FNUZ: "F8_E4M3FNUZ", F8_E5M2FNUZ: "F8_E5M2FNUZ", I16: "I16", U16: "U16",
	F16: "F16", BF16: "BF16", I32: "I32", U32: "U32", F32: "F32", I64: "I64",
	U64: "U64", F64: "F64", C64: "C64",
}

var dtypeBits = [numDTypes]uint64{
	F4: 4, F6_E2M3: 6, F6_E3M2: 6, BOOL: 8, U8: 8, I8: 8, F8_E5M2: 8, F8_E4M3: 8,
	F8_E8M0: 8, F8_E4M3FNUZ: 8, F8_E5M2FNUZ: 8, I16: 16, U16: 16, F16: 16, BF16: 16,
	I32: 32, U32: 32, F32: 32, I64: 64, U64: 64, F64: 64, C64: 64,
}

// String returns the header spelling, e.g. "F8_E4M3".
func (d DType) String() string {
	if d >= numDTypes || d == Invalid {
		return "invalid"
	}
	return dtypeNames[d]
}

// Bits is the storage size of one element in bits (4 for F4, 64 for C64).
func (d DType) Bits() uint64 {
	if d >= numDTypes {
		return 0
	}
	return dtypeBits[d]
}

// IsFloat reports whether the dtype holds floating-point values of any width.
func (d DType) IsFloat() bool {
	switch d {
	case F4, F6_E2M3, F6_E3M2, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F16, BF16, F32, F64:
		return true
	}
	return false
}

// ParseDType maps a header spelling to its DType.
func ParseDType(s string) (DType, bool) {
	for d := DType(1); d < numDTypes; d++ {
		if dtypeNames[d] == s {
			return d, true
		}
	}
	return Invalid, false
}

// DTypes lists every valid dtype in declaration order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := DType(1); d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// MarshalText writes the header spelling, so DTypes serialise as strings.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
