//go:build js

package hub

// In the browser the Fetcher comes from wasm/ (WithFetcher).
func defaultFetcher() Fetcher { return nil }
