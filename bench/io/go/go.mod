module spindle/bench/io/go

go 1.21
