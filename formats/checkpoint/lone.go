package checkpoint

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// adoptFileMetadata gives a checkpoint of one .safetensors file the scheme
// its __metadata__ declares (scheme.FromFileMetadata), and groups its
// tensors again under it: when there are no config files, or when the
// source is that one file (hub.OneFile), read with the config files beside
// it, since a file that says what it is (one `quantscope quantize` wrote
// into a repo folder) is better described by itself than by the folder's
// model. A repo read whole keeps its config files: they are what runtimes
// read.
func (c *Checkpoint) adoptFileMetadata(opt Options) error {
	if c.partial || len(c.Shards) != 1 || c.Shards[0].Header == nil { // a partial load's one shard is not the repo
		return nil
	}
	if one, ok := c.Source.(hub.OneFile); (c.Config != nil || c.HFQuant != nil) && !(ok && one.OneFile()) {
		return nil
	}
	sh := c.Shards[0]
	s, ok, err := scheme.FromFileMetadata(sh.Header.Metadata)
	if err != nil {
		return fmt.Errorf("%s: %w", sh.Path, err)
	}
	if !ok {
		return nil
	}
	c.Scheme = s
	c.digest(sh, nil, opt)
	return nil
}
