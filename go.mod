module github.com/torchfit/torchfit

go 1.26.0

require (
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/stretchr/testify v1.10.0
	golang.org/x/term v0.47.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
