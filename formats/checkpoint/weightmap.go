package checkpoint

import "hash/maphash"

// Index is model.safetensors.index.json: its weight_map (tensor name →
// shard path) and metadata.total_size. A large repo's weight_map holds
// hundreds of thousands of names over a few dozen shards, and its file is
// the largest thing an inventory reads (17 MB for DeepSeek-R1's), so once
// parsed it keeps neither the file nor the names: an entry is the 64-bit
// hash of its name and a shard number, found through an open-addressing
// table. Every shard header's name is looked up in it; the names of entries
// no header holds (a broken repo) are read again from the file when a
// finding needs them (entryNames).
//
// While the table is built the names are at hand and a repeated one is
// told exactly. Afterwards Shard compares hashes only: with 64-bit hashes
// of a random seed, two of a repo's names agreeing by chance has odds of
// about n²/2⁶⁵ (10⁻⁹ for 180,000 names), and then one lookup would name the
// wrong shard in a finding.
type Index struct {
	TotalSize *uint64

	hashes  []uint64    // weight_map's names hashed, in the file's order
	shardOf []uint32    // entry i is in shards[shardOf[i]]
	shards  []string    // distinct shard paths, in order of first mention
	hints   []shardHint // per shard: its entries and their names' bytes
	table   []int32     // entry+1, 0 when empty; len is a power of 2

	names []string // only while the table is built: exact repeats
}

var indexSeed = maphash.MakeSeed()

func newNameTable(n int) []int32 {
	size := 64
	for size < 2*n {
		size *= 2
	}
	return make([]int32, size)
}

// add records an entry, or returns false when the name is already there.
func (x *Index) add(name string, shard uint32) bool {
	if 2*(len(x.hashes)+1) > len(x.table) {
		x.grow()
	}
	mask := len(x.table) - 1
	hash := maphash.String(indexSeed, name)
	h := int(hash) & mask
	for ; x.table[h] != 0; h = (h + 1) & mask {
		if i := x.table[h] - 1; x.hashes[i] == hash && x.names[i] == name {
			return false
		}
	}
	x.hashes = append(x.hashes, hash)
	x.names = append(x.names, name)
	x.shardOf = append(x.shardOf, shard)
	for int(shard) >= len(x.hints) {
		x.hints = append(x.hints, shardHint{})
	}
	x.hints[shard].tensors++
	x.hints[shard].nameBytes += len(name)
	x.table[h] = int32(len(x.hashes))
	return true
}

func (x *Index) grow() {
	x.table = newNameTable(len(x.table))
	mask := len(x.table) - 1
	for i, hash := range x.hashes {
		h := int(hash) & mask
		for x.table[h] != 0 {
			h = (h + 1) & mask
		}
		x.table[h] = int32(i + 1)
	}
}

// seal drops the names once the table is built.
func (x *Index) seal() { x.names = nil }

// Shard returns the shard weight_map names for a tensor (none on a nil
// Index).
func (x *Index) Shard(name string) (string, bool) {
	if x == nil || len(x.table) == 0 {
		return "", false
	}
	mask := len(x.table) - 1
	hash := maphash.String(indexSeed, name)
	for h := int(hash) & mask; x.table[h] != 0; h = (h + 1) & mask {
		if i := x.table[h] - 1; x.hashes[i] == hash {
			return x.shards[x.shardOf[i]], true
		}
	}
	return "", false
}

// Len is the number of weight_map entries.
func (x *Index) Len() int { return len(x.hashes) }

// Shards calls f with each shard weight_map names, in order of first
// mention, and what it says the shard holds.
func (x *Index) Shards(f func(path string, h shardHint)) {
	for i, p := range x.shards {
		f(p, x.hints[i])
	}
}
