module github.com/shipstream/bloodraven/deployclient

go 1.24

require (
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
