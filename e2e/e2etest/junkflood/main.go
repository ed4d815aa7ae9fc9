// Command junkflood is the e2e suite's load generator for unauthenticated
// amplification (issue 21): it sends unique JWT-shaped bearer tokens to one
// URL at a fixed rate over kept-alive TLS connections and prints how they
// were answered, as JSON. It runs as its own process, built without the
// race detector, so the load it makes is the server's to carry, not the
// test binary's.
//
// A quarter of the tokens carry a wrong audience, a quarter are expired,
// and half copy the given claims (a real token's issuer, audience and
// expiry) with a forged signature, so that only a TokenReview could refuse
// them.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "", "URL to send GET requests to")
	caFile := flag.String("ca", "", "CA bundle of the server")
	rate := flag.Int("rate", 200, "requests per second")
	dur := flag.Duration("duration", 30*time.Second, "how long")
	claimsJSON := flag.String("claims", "{}", "claims (JSON object) the forged tokens copy")
	flag.Parse()

	var claims map[string]any
	if err := json.Unmarshal([]byte(*claimsJSON), &claims); err != nil {
		fail(err)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, MaxIdleConnsPerHost: 64}}

	// Every token is made before the first request.
	n := int(dur.Seconds() * float64(*rate))
	enc := base64.RawURLEncoding.EncodeToString
	header := enc([]byte(`{"alg":"RS256","kid":"junk"}`))
	tokens := make([]string, n)
	for i := range tokens {
		c := map[string]any{}
		for k, v := range claims {
			c[k] = v
		}
		c["jti"] = fmt.Sprintf("junk-%d-%d", os.Getpid(), i)
		switch i % 4 {
		case 0:
			c["aud"] = []string{"someone-else"}
		case 1:
			c["exp"] = time.Now().Add(-time.Hour).Unix()
		}
		payload, _ := json.Marshal(c)
		tokens[i] = header + "." + enc(payload) + "." + enc([]byte(fmt.Sprintf("forged-signature-%d", i)))
	}

	var mu sync.Mutex
	byStatus := map[int]int{}
	sent := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	for i := 0; i < n; i++ {
		<-tick.C
		select {
		case sem <- struct{}{}:
		default:
			continue // saturated: the server answers slower than the rate
		}
		sent++
		wg.Add(1)
		go func(token string) {
			defer func() { <-sem; wg.Done() }()
			req, _ := http.NewRequest(http.MethodGet, *url, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			status := 0
			if resp, err := hc.Do(req); err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			byStatus[status]++
			mu.Unlock()
		}(tokens[i])
	}
	tick.Stop()
	wg.Wait()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"sent": sent, "byStatus": byStatus})
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "junkflood:", err)
	os.Exit(2)
}
