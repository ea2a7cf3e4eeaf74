//go:build !amd64

package cpufeat

const avx2, avx512, f16c = false, false, false
