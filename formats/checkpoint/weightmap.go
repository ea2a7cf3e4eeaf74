package checkpoint

import "hash/maphash"

// Index is model.safetensors.index.json: its weight_map (tensor name →
// shard path) and metadata.total_size. A large repo's weight_map holds
// hundreds of thousands of names over a few dozen shards, so it is kept as
// the names in file order, a shard number apiece and an open-addressing
// table of entry numbers, not as a Go map of strings (less than half the
// memory, and no per-entry hashing of two strings).
type Index struct {
	TotalSize *uint64

	names   []string // weight_map's names, in the file's order
	shardOf []uint32 // names[i] is in shards[shardOf[i]]
	shards  []string // distinct shard paths, in order of first mention
	table   []int32  // entry+1, 0 when empty; len is a power of 2
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
	if 2*(len(x.names)+1) > len(x.table) {
		x.grow()
	}
	mask := len(x.table) - 1
	h := int(maphash.String(indexSeed, name)) & mask
	for ; x.table[h] != 0; h = (h + 1) & mask {
		if x.names[x.table[h]-1] == name {
			return false
		}
	}
	x.names = append(x.names, name)
	x.shardOf = append(x.shardOf, shard)
	x.table[h] = int32(len(x.names))
	return true
}

func (x *Index) grow() {
	x.table = newNameTable(len(x.table))
	mask := len(x.table) - 1
	for i, name := range x.names {
		h := int(maphash.String(indexSeed, name)) & mask
		for x.table[h] != 0 {
			h = (h + 1) & mask
		}
		x.table[h] = int32(i + 1)
	}
}

// Shard returns the shard weight_map names for a tensor (none on a nil
// Index).
func (x *Index) Shard(name string) (string, bool) {
	if x == nil || len(x.table) == 0 {
		return "", false
	}
	mask := len(x.table) - 1
	for h := int(maphash.String(indexSeed, name)) & mask; x.table[h] != 0; h = (h + 1) & mask {
		if i := x.table[h] - 1; x.names[i] == name {
			return x.shards[x.shardOf[i]], true
		}
	}
	return "", false
}

// Len is the number of weight_map entries.
func (x *Index) Len() int { return len(x.names) }

// Each calls f with each weight_map entry, in the file's order.
func (x *Index) Each(f func(name, shard string)) {
	for i, name := range x.names {
		f(name, x.shards[x.shardOf[i]])
	}
}

// WeightMap returns weight_map as a map (built on each call).
func (x *Index) WeightMap() map[string]string {
	m := make(map[string]string, len(x.names))
	x.Each(func(name, shard string) { m[name] = shard })
	return m
}
