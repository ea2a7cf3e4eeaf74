// Package hugeheap asks the kernel to back the next part of the Go heap
// with transparent huge pages, for the CLI's commands that build a whole
// repo's inventory in one short run.
//
// Such a run allocates about 120 MB for a 180,000-tensor repo and touches
// every page once. With 4 KiB pages that is some 28,000 page faults and as
// many TLB entries; on a virtual machine with shadow or nested paging each
// fault and each TLB miss is expensive, and `inspect` spent half its CPU
// time on them (README, "Speed"). The Go runtime does not ask for huge pages
// itself, and where the system's THP mode is `madvise` (the common default)
// none are used.
//
// Prepare reserves n bytes of heap with one allocation (fresh memory from
// the OS, which the runtime neither touches nor clears), marks that range
// MADV_HUGEPAGE, and frees it with a collection; the heap then hands the
// same addresses out again, lowest first, so the inventory's allocations
// fault in 2 MiB at a time. Where THP is off, or on other systems, it does
// nothing harmful: the range is simply ordinary heap.
package hugeheap

// Prepare marks the next n bytes of the heap for huge pages and reports
// whether the kernel accepted the advice. Call it once, early, before the
// allocations it is meant for.
func Prepare(n int) bool { return prepare(n) }
