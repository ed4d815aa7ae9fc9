// Command probe is the node suite's network probe, run in Pods (its image
// is built by the suite): `probe sleep` idles until killed, `probe dial
// HOST:PORT TIMEOUT` exits 0 when a TCP connection opens within TIMEOUT and
// 1 otherwise, printing what happened.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe sleep | probe dial HOST:PORT TIMEOUT")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "sleep":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
	case "dial":
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: probe dial HOST:PORT TIMEOUT")
			os.Exit(2)
		}
		timeout, err := time.ParseDuration(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		start := time.Now()
		conn, err := net.DialTimeout("tcp", os.Args[2], timeout)
		if err != nil {
			fmt.Printf("refused after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
			os.Exit(1)
		}
		conn.Close()
		fmt.Printf("connected after %s\n", time.Since(start).Round(time.Millisecond))
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
