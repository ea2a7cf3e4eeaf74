package numeric

// DecodeE4M3Scaled writes e4m3(src[i])·scale into dst[:len(src)]: the FP8
// decode fused with its block's scale, one float32 rounding, the value the
// table decoder's output times scale gives bit for bit. On AVX-512 sixteen
// codes go at a time (a group holding a NaN code takes the table).
func DecodeE4M3Scaled(dst []float32, src []byte, scale float32) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		k := e4m3ScaledSIMD(dst[i:], src[i:], scale)
		i += k
		end := len(src)
		if i+16 <= len(src) && useAVX512 {
			end = i + 16 // the group the kernel stopped at
		}
		mulTable(&e4m3Table, dst[i:end], src[i:end], scale)
		i = end
	}
}

// DecodeE4M3Blocks is DecodeE4M3Scaled over runs of block codes, code i
// times scales[i/block] (a row of an FP8 block-scaled weight): one call a
// row. scales must cover every block src touches.
func DecodeE4M3Blocks(dst []float32, src []byte, scales []float32, block int) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		i += e4m3BlocksSIMD(dst[i:], src[i:], scales[i/block:], block)
		if i == len(src) {
			return
		}
		// the kernel stopped at a NaN code or the tail, or is not in use:
		// one block (or what is left of it) on the table
		end := min((i/block+1)*block, len(src))
		mulTable(&e4m3Table, dst[i:end], src[i:end], scales[i/block])
		i = end
	}
}

// MulTable writes tab[in[i]]·scale into out[:len(in)]: any 8-bit code's
// decode fused with its scale.
func MulTable(tab *[256]float32, out []float32, in []byte, scale float32) {
	mulTable(tab, out, in, scale)
}

func mulTable(tab *[256]float32, out []float32, in []byte, scale float32) {
	out = out[:len(in)]
	n := len(in) &^ 7
	for i := 0; i < n; i += 8 {
		s := (*[8]byte)(in[i : i+8])
		o := (*[8]float32)(out[i : i+8])
		o[0], o[1], o[2], o[3] = tab[s[0]]*scale, tab[s[1]]*scale, tab[s[2]]*scale, tab[s[3]]*scale
		o[4], o[5], o[6], o[7] = tab[s[4]]*scale, tab[s[5]]*scale, tab[s[6]]*scale, tab[s[7]]*scale
	}
	for i := n; i < len(in); i++ {
		out[i] = tab[in[i]] * scale
	}
}
