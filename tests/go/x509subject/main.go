// Command x509subject prints how Go's crypto/x509 reads the subject of DER certificate
// signing requests and certificates: the reference of tests/x509_differential.rs.
//
// Input, one entry a line on stdin: "csr <base64 DER>" or "cert <base64 DER>".
// Output, one JSON object a line on stdout, in input order:
//
//	{"ok":true,"cn":"<Subject.CommonName>","o":["<Subject.Organization>", ...]}
//	{"ok":false,"error":"<why Go refuses it>"}
//
// A request whose self-signature does not verify counts as refused. Standard library only.
package main

import (
	"bufio"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type result struct {
	OK    bool     `json:"ok"`
	Error string   `json:"error,omitempty"`
	CN    string   `json:"cn"`
	O     []string `json:"o"`
}

func read(kind string, der []byte) result {
	switch kind {
	case "csr":
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			return result{Error: err.Error()}
		}
		if err := csr.CheckSignature(); err != nil {
			return result{Error: "signature: " + err.Error()}
		}
		return result{OK: true, CN: csr.Subject.CommonName, O: orgs(csr.Subject.Organization)}
	case "cert":
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return result{Error: err.Error()}
		}
		return result{OK: true, CN: cert.Subject.CommonName, O: orgs(cert.Subject.Organization)}
	}
	return result{Error: fmt.Sprintf("unknown entry kind %q", kind)}
}

func orgs(o []string) []string {
	if o == nil {
		return []string{}
	}
	return o
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		kind, b64, found := strings.Cut(line, " ")
		var r result
		if !found {
			r = result{Error: "malformed input line"}
		} else if der, err := base64.StdEncoding.DecodeString(b64); err != nil {
			r = result{Error: "base64: " + err.Error()}
		} else {
			r = read(kind, der)
		}
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
