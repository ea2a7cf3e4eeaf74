// Package quantscope holds the page's static files, index.html and web/, so
// that the companion serves them from its own binary. The wasm engine is a
// build output (make wasm) and is served from disk beside the binary.
package quantscope

import "embed"

// Web is index.html and web/.
//
//go:embed index.html web
var Web embed.FS
