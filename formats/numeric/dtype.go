package numeric

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// Decoder decodes a run of stored elements into float32.
type Decoder func(dst []float32, src []byte)

// UnsupportedError reports a dtype that is valid safetensors but has no
// float32 decoder here (F6 layouts, complex numbers).
type UnsupportedError struct{ DType safetensors.DType }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("numeric: no float32 decoder for dtype %s", e.DType)
}

// DecoderFor returns the bulk decoder of a dtype. For F4 it decodes nibble
// pairs, so the destination needs two values a byte.
func DecoderFor(d safetensors.DType) (Decoder, error) {
	switch d {
	case safetensors.F32:
		return DecodeF32, nil
	case safetensors.F64:
		return DecodeF64, nil
	case safetensors.F16:
		return DecodeF16, nil
	case safetensors.BF16:
		return DecodeBF16, nil
	case safetensors.F8_E4M3:
		return DecodeE4M3, nil
	case safetensors.F8_E5M2:
		return DecodeE5M2, nil
	case safetensors.F8_E4M3FNUZ:
		return DecodeE4M3FNUZ, nil
	case safetensors.F8_E5M2FNUZ:
		return DecodeE5M2FNUZ, nil
	case safetensors.F8_E8M0:
		return DecodeE8M0, nil
	case safetensors.F4:
		return DecodeE2M1, nil
	case safetensors.I8:
		return DecodeI8, nil
	case safetensors.U8:
		return DecodeU8, nil
	case safetensors.BOOL:
		return decodeBool, nil
	case safetensors.I16:
		return DecodeI16, nil
	case safetensors.U16:
		return DecodeU16, nil
	case safetensors.I32:
		return DecodeI32, nil
	case safetensors.U32:
		return DecodeU32, nil
	case safetensors.I64:
		return DecodeI64, nil
	case safetensors.U64:
		return DecodeU64, nil
	}
	return nil, &UnsupportedError{DType: d}
}

// Decode decodes a whole tensor's bytes; the result has one value per element.
func Decode(d safetensors.DType, src []byte) ([]float32, error) {
	dec, err := DecoderFor(d)
	if err != nil {
		return nil, err
	}
	n := len(src) * 8 / int(d.Bits())
	dst := make([]float32, n)
	dec(dst, src)
	return dst, nil
}
