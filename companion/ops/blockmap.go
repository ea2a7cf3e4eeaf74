package ops

// MaxBlockMap bounds each side of a per-block map sent to the page: a module
// with more rows or 16-blocks than this is summed into cells of several.
const MaxBlockMap = 256

// BlockMap sums a [rows, cols] 0/1 map into at most MaxBlockMap × MaxBlockMap
// cells: cell (i, j) covers rows [i·rows/R, (i+1)·rows/R) and columns
// [j·cols/C, (j+1)·cols/C), and holds the share of marked entries in it,
// scaled to 0..255 and rounded to nearest (255: every one, 0: none; a cell
// with any marked entry is at least 1, so that a lone change stays visible).
// Without downsampling a cell is exactly 0 or 255.
func BlockMap(marks []byte, rows, cols int) (out []byte, r, c int) {
	r, c = min(rows, MaxBlockMap), min(cols, MaxBlockMap)
	if r == 0 || c == 0 {
		return []byte{}, r, c
	}
	sum := make([]int, r*c)
	size := make([]int, r*c)
	colCell := cells(cols, c)
	for ci, lo := range bounds(rows, r) {
		for i := lo; i < (ci+1)*rows/r; i++ {
			for j, m := range marks[i*cols : (i+1)*cols] {
				k := ci*c + colCell[j]
				sum[k] += int(m)
				size[k]++
			}
		}
	}
	out = make([]byte, r*c)
	for k := range out {
		v := (sum[k]*255 + size[k]/2) / size[k]
		if v == 0 && sum[k] > 0 {
			v = 1
		}
		out[k] = byte(v)
	}
	return out, r, c
}

// bounds is where each of the n cells over length starts: k·length/n.
func bounds(length, n int) []int {
	b := make([]int, n)
	for k := range b {
		b[k] = k * length / n
	}
	return b
}

// cells maps each index of length to its cell among n.
func cells(length, n int) []int {
	out := make([]int, length)
	for k, lo := range bounds(length, n) {
		for x := lo; x < (k+1)*length/n; x++ {
			out[x] = k
		}
	}
	return out
}
