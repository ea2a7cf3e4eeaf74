module github.com/quantscope/quantscope

go 1.26

require (
	github.com/hack-pad/safejs v0.1.1
	github.com/x448/float16 v0.8.4
)
