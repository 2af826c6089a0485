// The io suite's Go competitor (bench/io/io_bench.cpp): a stream echo
// server on the standard library's net package, one goroutine per
// connection. Usage: go_echo_server PORT WORKERS. The driver sets
// GOMAXPROCS=WORKERS; WORKERS is otherwise only checked.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 16384)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go_echo_server PORT WORKERS")
		os.Exit(2)
	}
	port, err1 := strconv.Atoi(os.Args[1])
	workers, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil || port <= 0 || workers < 1 {
		fmt.Fprintln(os.Stderr, "usage: go_echo_server PORT WORKERS")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go_echo_server:", err)
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go serve(c) // TCP_NODELAY is Go's default
	}
}
