package cpufeat

func cpuidex(leaf, sub uint32) (a, b, c, d uint32)
func xgetbv0() uint32

var avx2, avx512, f16c = probe()

func probe() (avx2, avx512, f16c bool) {
	maxLeaf, _, _, _ := cpuidex(0, 0)
	if maxLeaf < 7 {
		return false, false, false
	}
	_, _, c1, _ := cpuidex(1, 0)
	if c1&(1<<27) == 0 || c1&(1<<28) == 0 { // OSXSAVE, AVX
		return false, false, false
	}
	xcr0 := xgetbv0()
	if xcr0&6 != 6 { // XMM and YMM state
		return false, false, false
	}
	f16c = c1&(1<<29) != 0
	_, b7, _, _ := cpuidex(7, 0)
	avx2 = b7&(1<<5) != 0
	avx512 = avx2 && b7&(1<<16) != 0 && xcr0&0xE6 == 0xE6 // AVX-512 F; opmask, ZMM hi256, hi16 ZMM
	return avx2, avx512, f16c
}
