package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"time"
)

// TLS for NATS: a CA of the fleet (ECDSA P-256, made by init) signs each embedded
// server's certificate when it starts; clients verify the server against the CA
// (from their .creds file or a CA file). Routes between embedded servers use the
// same certificates both ways (mutual TLS).

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
)

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("natsauth: serial: %w", err)
	}
	return n, nil
}

// newCA makes a self-signed CA certificate and its key.
func newCA() (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("natsauth: ca key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "fleetmux NATS CA", Organization: []string{"fleetmux"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("natsauth: ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("natsauth: ca certificate: %w", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func marshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("natsauth: ca key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCA reads a CA certificate and its PKCS#8 ECDSA key (PEM).
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("natsauth: %s: no certificate", CACertFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("natsauth: %s: %w", CACertFile, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("natsauth: %s: no key", caKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("natsauth: %s: %w", caKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("natsauth: %s does not belong to %s", caKeyFile, CACertFile)
	}
	return cert, key, nil
}

// CertPool parses PEM certificates (other PEM blocks are skipped) into a pool.
func CertPool(pemData []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errors.New("natsauth: no CA certificate")
	}
	return pool, nil
}

// serverNames are the names a server certificate carries: the given hosts, this
// machine's loopback names and host name, and, for a wildcard host, every address
// of this machine's interfaces.
func serverNames(hosts []string) (dns []string, ips []net.IP) {
	add := func(h string) {
		if h == "" {
			return
		}
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsUnspecified() {
				addrs, _ := net.InterfaceAddrs()
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok {
						ips = append(ips, n.IP)
					}
				}
				return
			}
			ips = append(ips, ip)
			return
		}
		dns = append(dns, h)
	}
	for _, h := range hosts {
		add(h)
	}
	add("localhost")
	add("127.0.0.1")
	add("::1")
	if h, err := os.Hostname(); err == nil {
		add(h)
	}
	slices.Sort(dns)
	dns = slices.Compact(dns)
	ips = slices.CompactFunc(ips, net.IP.Equal)
	return dns, ips
}

// serverTLS issues a server certificate from the CA for hosts (usable for both
// ends of a TLS connection, so routes can present it as clients) and returns the
// server's TLS configuration and the CA pool.
func (a *Authority) serverTLS(hosts []string) (*tls.Config, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("natsauth: server key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	dns, ips := serverNames(hosts)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fleetmux NATS server", Organization: []string{"fleetmux"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca, &key.PublicKey, a.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("natsauth: server certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.ca)
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	}
	return cfg, pool, nil
}
