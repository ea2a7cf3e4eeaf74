package safetensors

import (
	"hash/maphash"
	"sync"
)

// nameSet finds a header's duplicate names while it is parsed: an open
// addressing table of indices into the tensors read so far. A shard of a
// large repo holds thousands of names; a Go map of them per shard, kept
// for the header's lifetime, cost more than the parse of the names.
// Tables are reused from one header to the next.
type nameSet struct {
	slots   []int32 // index+1 into tensors, 0 when empty; len is a power of 2
	n       int
	offsets []int64 // the parse's entry offsets, kept for the next header
}

var (
	nameSeed  = maphash.MakeSeed()
	namePools sync.Pool
)

func newNameSet(expect int) *nameSet {
	size := 64
	for size < 2*expect {
		size *= 2
	}
	s, ok := namePools.Get().(*nameSet)
	if !ok {
		return &nameSet{slots: make([]int32, size)}
	}
	if len(s.slots) >= size {
		clear(s.slots)
	} else {
		s.slots = make([]int32, size)
	}
	s.n = 0
	return s
}

func (s *nameSet) release() { namePools.Put(s) }

// add records tensors[i]'s name, or reports the index of an earlier tensor
// of that name.
func (s *nameSet) add(tensors []Tensor, i int) (int, bool) {
	if 2*(s.n+1) > len(s.slots) {
		s.grow(tensors)
	}
	name := tensors[i].Name
	mask := len(s.slots) - 1
	for h := int(maphash.String(nameSeed, name)) & mask; ; h = (h + 1) & mask {
		j := s.slots[h]
		if j == 0 {
			s.slots[h] = int32(i + 1)
			s.n++
			return 0, false
		}
		if tensors[j-1].Name == name {
			return int(j - 1), true
		}
	}
}

func (s *nameSet) grow(tensors []Tensor) {
	old := s.slots
	s.slots = make([]int32, 2*len(old))
	mask := len(s.slots) - 1
	for _, j := range old {
		if j == 0 {
			continue
		}
		h := int(maphash.String(nameSeed, tensors[j-1].Name)) & mask
		for s.slots[h] != 0 {
			h = (h + 1) & mask
		}
		s.slots[h] = j
	}
}
