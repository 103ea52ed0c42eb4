// Command gen-pod-certificate-vectors writes ca/src/testdata/pod_certificate_keys.json: public
// keys of every kind a kubelet may (or may not) send in a PodCertificateRequest, made and
// serialized by Go's own crypto/x509 (the reader kube-apiserver uses), each with a proof of
// possession over a pod UID made as the API documents it and a stub PKCS#10 request signed
// with the key, so that kustos' reader is checked against Go's writer.
//
// Usage: go run scripts/gen-pod-certificate-vectors.go > ca/src/testdata/pod_certificate_keys.json
//
// Go's standard library only. The output changes on every run (fresh keys and signatures).
package main

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"os"
	"strconv"
)

const podUID = "0d4b1c3e-2a7f-4e55-9a1b-7c6d5e4f3a21"

type vector struct {
	Name string `json:"name"`
	// PKIX (SubjectPublicKeyInfo) DER, base64.
	PKIX string `json:"pkix"`
	// Signature over podUID as the PodCertificateRequest API describes it, base64 ("" when
	// the key cannot sign).
	Proof string `json:"proof"`
	// x509.CreateCertificateRequest with an empty template and the key, DER, base64 (""
	// when the key cannot sign a request).
	Stub string `json:"stub"`
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func signed(name string, pub any, signer crypto.Signer, proof []byte) vector {
	v := vector{Name: name, PKIX: b64(must(x509.MarshalPKIXPublicKey(pub))), Proof: b64(proof)}
	if signer != nil {
		v.Stub = b64(must(x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, signer)))
	}
	return v
}

func main() {
	digest := sha256.Sum256([]byte(podUID))
	var out []vector
	for _, bits := range []int{2048, 3072, 4096} {
		key := must(rsa.GenerateKey(rand.Reader, bits))
		// crypto/rsa.SignPSS with nil options: the salt as long as the key allows.
		proof := must(rsa.SignPSS(rand.Reader, key, crypto.SHA256, digest[:], nil))
		out = append(out, signed("rsa"+strconv.Itoa(bits), &key.PublicKey, key, proof))
		if bits == 3072 {
			// The salt as long as the digest: Go's VerifyPSS with nil options accepts any.
			short := must(rsa.SignPSS(rand.Reader, key, crypto.SHA256, digest[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}))
			out = append(out, vector{Name: "rsa3072-salt32", PKIX: out[len(out)-1].PKIX, Proof: b64(short)})
		}
	}
	for _, c := range []struct {
		name  string
		curve elliptic.Curve
	}{{"p224", elliptic.P224()}, {"p256", elliptic.P256()}, {"p384", elliptic.P384()}, {"p521", elliptic.P521()}} {
		key := must(ecdsa.GenerateKey(c.curve, rand.Reader))
		proof := must(ecdsa.SignASN1(rand.Reader, key, digest[:]))
		out = append(out, signed(c.name, &key.PublicKey, key, proof))
	}
	pub, priv := must2(ed25519.GenerateKey(rand.Reader))
	out = append(out, signed("ed25519", pub, priv, ed25519.Sign(priv, []byte(podUID))))
	x := must(ecdh.X25519().GenerateKey(rand.Reader))
	out = append(out, vector{Name: "x25519", PKIX: b64(must(x509.MarshalPKIXPublicKey(x.PublicKey())))})
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"podUID": podUID, "keys": out}); err != nil {
		panic(err)
	}
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

