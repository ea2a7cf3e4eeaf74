package session

import (
	"context"
	"encoding/json"

	"github.com/quantscope/quantscope/formats/compare"
)

// Compare opens another SOURCE (with opt, Progress included) and returns the
// comparison of this session's repo (A) with it (B), as `quantscope diff
// --json` prints it. The other repo is closed again: the page keeps one
// repo open, the one it shows.
func (s *Session) Compare(ctx context.Context, source string, opt Options) ([]byte, error) {
	b, err := Open(ctx, source, opt)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return json.Marshal(compare.New(compare.FromCheckpoint(s.ck), compare.FromCheckpoint(b.ck)))
}
