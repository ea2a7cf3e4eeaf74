package safetensors

func countByte(s string, c byte) int { return countByteSWAR(s, c) }
