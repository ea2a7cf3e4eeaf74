module github.com/quantscope/quantscope

go 1.26

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	github.com/dlclark/regexp2 v1.11.5
	github.com/gorilla/websocket v1.5.3
	github.com/hack-pad/safejs v0.1.1
	github.com/x448/float16 v0.8.4
	gorgonia.org/cu v0.9.6
)

require (
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/google/uuid v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
