// Command authflood is the e2e suite's load generator for an authorized
// tenant's flood (issue 35, item 1): it sends GET requests with one valid
// bearer token to one URL at a fixed rate, over HTTP/2 on several TLS
// connections, and prints how they were answered, as JSON. It runs as its
// own process, built without the race detector, so the load it makes is the
// server's to carry, not the test binary's. It keeps its rate when it is
// woken late (it runs SCHED_IDLE) by sending what fell due, up to 100 ms
// of it; a paused process (SIGSTOP) makes up nothing: the number of
// requests counts sending time.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type stats struct {
	Sent        int64          `json:"sent"`
	Connections int            `json:"connections"`
	ByStatus    map[string]int `json:"byStatus"`
	Protocols   map[string]int `json:"protocols"`
}

func main() {
	url := flag.String("url", "", "URL to send GET requests to")
	caFile := flag.String("ca", "", "CA bundle of the server")
	rate := flag.Int("rate", 400, "requests per second")
	dur := flag.Duration("duration", 30*time.Second, "how long to send")
	conns := flag.Int("connections", 16, "TLS connections (HTTP/2, multiplexed)")
	flag.Parse()
	token := os.Getenv("AUTHFLOOD_TOKEN") // not a flag: never in a process listing

	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	clients := make([]*http.Client, *conns)
	for i := range clients {
		// One transport each: its own connection, HTTP/2 multiplexed.
		clients[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}}
	}
	var mu sync.Mutex
	st := stats{Connections: *conns, ByStatus: map[string]int{}, Protocols: map[string]int{}}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	send := func(hc *http.Client) {
		defer func() { <-sem; wg.Done() }()
		req, _ := http.NewRequest(http.MethodGet, *url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		status, proto := "error", ""
		if resp, err := hc.Do(req); err == nil {
			status, proto = strconv.Itoa(resp.StatusCode), resp.Proto
			resp.Body.Close()
		} else {
			status = "error: " + strings.SplitN(err.Error(), ":", 2)[0]
		}
		mu.Lock()
		st.ByStatus[status]++
		if proto != "" {
			st.Protocols[proto]++
		}
		mu.Unlock()
	}
	// The schedule: by now, rate per second since base. A wake-up that
	// comes late (the process is SCHED_IDLE on a loaded machine) sends
	// what fell due meanwhile, up to maxBatch; a longer gap (SIGSTOP, or a
	// starved spell) is not made up: the schedule restarts, so a resumed
	// flood does not arrive as one burst.
	n := int(dur.Seconds() * float64(*rate))
	maxBatch := max(1, *rate/10) // 100 ms of the rate
	base, baseDue, planned := time.Now(), 0, 0
	for planned < n {
		time.Sleep(2 * time.Millisecond)
		now := time.Now()
		due := baseDue + int(now.Sub(base).Seconds()*float64(*rate))
		if due-planned > maxBatch {
			base, baseDue, due = now, planned+maxBatch, planned+maxBatch
		}
		for ; planned < due && planned < n; planned++ {
			select {
			case sem <- struct{}{}:
			default:
				continue // saturated
			}
			st.Sent++
			wg.Add(1)
			go send(clients[planned%len(clients)])
		}
	}
	wg.Wait()
	b, _ := json.Marshal(st)
	fmt.Println(string(b))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
