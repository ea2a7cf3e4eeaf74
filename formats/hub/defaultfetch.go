//go:build !js

package hub

func defaultFetcher() Fetcher { return NewNetFetcher() }
