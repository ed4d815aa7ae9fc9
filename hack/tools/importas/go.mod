// Tools module: builds importas for `make lint` (one import alias per package).
module github.com/shipstream/bloodraven/hack/tools/importas

go 1.26.0

tool github.com/julz/importas/cmd/importas

require (
	github.com/julz/importas v0.2.0 // indirect
	golang.org/x/mod v0.32.0 // indirect
	golang.org/x/sync v0.19.0 // indirect
	golang.org/x/tools v0.41.0 // indirect
)
