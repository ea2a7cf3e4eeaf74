package checkpoint

import (
	"errors"
	"fmt"
	"io"
)

// ReadTensorInto fills dst with len(dst) bytes of a tensor's data at offset
// off, without allocating: scheme's streamed decoders reuse their buffers.
func (c *Checkpoint) ReadTensorInto(name string, dst []byte, off int64) error {
	return c.readInto(name, dst, off, -1)
}

// ReadTensorWithin is ReadTensorInto for a read of a stream that ends end
// bytes into the tensor (a module's bands, up to the last row a slice
// wants): a remote shard reads ahead of the stream, and no further than
// end (hub.RemoteFile.ReadAtWithin).
func (c *Checkpoint) ReadTensorWithin(name string, dst []byte, off, end int64) error {
	return c.readInto(name, dst, off, end)
}

func (c *Checkpoint) readInto(name string, dst []byte, off, end int64) error {
	loc, ok := c.lookup(name)
	if !ok {
		return fmt.Errorf("%s: no tensor %q", c.Source.Name(), name)
	}
	n := int64(len(dst))
	if off < 0 || uint64(off)+uint64(n) > loc.t.NBytes() {
		return fmt.Errorf("%s: tensor %q: read [%d, %d) outside its %d bytes", loc.shard.Path, name, off, off+n, loc.t.NBytes())
	}
	start := loc.shard.Header.DataStart() + int64(loc.t.Begin)
	at := start + off
	var k int
	var err error
	if sr, ok := loc.shard.r.(streamReader); ok && end >= 0 {
		end = min(max(end, off+n), int64(loc.t.NBytes()))
		k, err = sr.ReadAtWithin(dst, at, start+end)
	} else {
		k, err = loc.shard.r.ReadAt(dst, at)
	}
	if err != nil && !(errors.Is(err, io.EOF) && int64(k) == n) {
		return fmt.Errorf("%s: tensor %q: reading %d bytes at %d: %w", loc.shard.Path, name, n, at, err)
	}
	return nil
}

// streamReader is a reader told where the stream a read belongs to ends:
// a remote file reads ahead no further, and keeps the next read in flight
// (hub.RemoteFile.ReadAtWithin).
type streamReader interface {
	ReadAtWithin(p []byte, off, end int64) (int, error)
}
