package checkpoint

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/scheme"
)

// adoptFileMetadata gives a checkpoint of one .safetensors file and no
// config files the scheme its __metadata__ declares (scheme.FromFileMetadata),
// and groups its tensors again under it. A repo with config files keeps
// theirs: they are what runtimes read.
func (c *Checkpoint) adoptFileMetadata(opt Options) error {
	if c.Config != nil || c.HFQuant != nil || len(c.Shards) != 1 || c.Shards[0].Header == nil {
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
