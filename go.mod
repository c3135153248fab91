module github.com/torchfit/torchfit

go 1.24
