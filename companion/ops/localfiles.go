package ops

import (
	"fmt"
	"path/filepath"
)

// LocalReads is where an operation may read the local files its parameters
// name (activations, eval text or token ids).
//
// On the command line the user typed the path, so any path is read (the
// zero value). A websocket client's job is confined: a page, or a script
// holding the launch token, must not be able to read the user's other files
// through the companion, so its paths are relative to the folder given with
// `serve --in-dir DIR`, and without that folder no local file is read. The
// check is on the path the client sends (no `..`, nothing absolute);
// symbolic links inside DIR are followed, since only the user puts them
// there.
type LocalReads struct {
	Confined bool   // a client's job: only paths under Dir
	Dir      string // absolute; empty with Confined: no local reads at all
}

// RuleInDir is the rule a confined read breaks.
const RuleInDir = "in-dir"

// Path returns the file to read for path p that the parameter what of
// operation op names, or an error with rule in-dir that says why it is
// refused and how to allow it.
func (r LocalReads) Path(op, what, p string) (string, error) {
	if !r.Confined {
		return p, nil
	}
	if r.Dir == "" {
		return "", fmt.Errorf("%s: rule %s: this companion reads no local files for its clients (start it with `quantscope serve --in-dir DIR` to allow paths under DIR); %s %q was not read", op, RuleInDir, what, p)
	}
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("%s: rule %s: %s %q is not a relative path inside the companion's input folder %s", op, RuleInDir, what, p, r.Dir)
	}
	return filepath.Join(r.Dir, p), nil
}
