package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// natsServerBuild is the nats-server binary of this run, built once.
var natsServerBuild struct {
	once sync.Once
	path string
	err  error
}

// natsServerBin returns a nats-server binary built from the module version go.mod
// pins (FLEETMUX_TEST_NATS_SERVER names a prebuilt one instead), building it once
// per run. A test that needs it is skipped, saying why, when it cannot be built.
func natsServerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLEETMUX_TEST_NATS_SERVER"); p != "" {
		return p
	}
	natsServerBuild.once.Do(func() {
		natsServerBuild.path, natsServerBuild.err = testutil.BuildNATSServer(binDir)
	})
	if natsServerBuild.err != nil {
		testutil.Missing(t, "a nats-server built from the pinned github.com/nats-io/nats-server/v2: %v", natsServerBuild.err)
	}
	return natsServerBuild.path
}

// natsServer is one nats-server process of a natsCluster: its addresses stay
// the same across restarts, and so does its store (JetStream catches up).
type natsServer struct {
	name    string
	client  string // host:port of its client listener
	monitor string // host:port of its HTTP monitoring (healthz)
	conf    string
	p       *proc
}

// natsCluster is the operator's own cluster of real nats-server processes, routed
// together, JetStream on, trusting the fleet (the fragment `enroll --print-jwt`
// prints) and serving TLS with a certificate from the fleet's CA.
type natsCluster struct {
	f       *fleet
	bin     string
	servers []*natsServer
}

// startNATSCluster writes the configurations of n servers listening on host and
// starts them; it waits until each says JetStream is healthy.
func startNATSCluster(t *testing.T, f *fleet, host, trustFragment, certFile, keyFile string, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{f: f, bin: natsServerBin(t)}
	clientPorts := freePorts(t, host, n)
	otherPorts := freePorts(t, "127.0.0.1", 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("%q", "nats://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(otherPorts[n+i]))))
	}
	for i := range n {
		s := &natsServer{
			name:    fmt.Sprintf("ns%d", i+1),
			client:  net.JoinHostPort(host, strconv.Itoa(clientPorts[i])),
			monitor: net.JoinHostPort("127.0.0.1", strconv.Itoa(otherPorts[i])),
		}
		dir := filepath.Join(f.root, s.name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf(`server_name: %s
listen: %q
http: %q
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 8GB }
cluster {
  name: fleetmux-test
  listen: %q
  routes: [%s]
}
tls { cert_file: %q, key_file: %q, timeout: 2 }
%s
`, s.name, s.client, s.monitor, filepath.Join(dir, "js"), "127.0.0.1:"+strconv.Itoa(otherPorts[n+i]), strings.Join(routes, ", "),
			certFile, keyFile, trustFragment)
		s.conf = filepath.Join(dir, "nats-server.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.servers = append(c.servers, s)
	}
	for i := range c.servers {
		c.start(i)
	}
	for i := range c.servers {
		c.waitHealthy(i, 60*time.Second)
	}
	return c
}

// urls is the cluster's client URLs, comma-separated (--nats).
func (c *natsCluster) urls() string {
	var u []string
	for _, s := range c.servers {
		u = append(u, "nats://"+s.client)
	}
	return strings.Join(u, ",")
}

func (c *natsCluster) start(i int) {
	s := c.servers[i]
	s.p = c.f.spawn(s.name, "", c.bin, "-c", s.conf)
}

// healthy reports whether server i answers its /healthz with 200: JetStream
// enabled, a meta leader known, and its streams and consumers current.
func (c *natsCluster) healthy(i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.servers[i].monitor+"/healthz", nil)
	resp, err := c.f.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *natsCluster) waitHealthy(i int, timeout time.Duration) {
	c.f.t.Helper()
	c.f.eventually(timeout, func() bool { return c.healthy(i) }, "nats-server %s healthy (JetStream current)", c.servers[i].name)
}

// trustFragment cuts the nats-server configuration out of `fleetmux enroll ...
// --print-jwt`'s output: from its "# fleetmux: trust" comment to max_control_line.
func trustFragment(t *testing.T, out string) string {
	t.Helper()
	i := strings.Index(out, "# fleetmux: trust")
	j := strings.Index(out, "max_control_line:")
	if i < 0 || j < i {
		t.Fatalf("enroll --print-jwt printed no server configuration:\n%s", out)
	}
	end := strings.IndexByte(out[j:], '\n')
	if end < 0 {
		end = len(out) - j
	}
	return out[i : j+end]
}

// serverCert issues a TLS certificate for a nats-server of one's own from the
// fleet's CA (the authority in data/keys), for hosts, and writes it and its key
// into dir; clients verify it with the CA their .creds carry.
func serverCert(t *testing.T, data, dir string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	read := func(name string) *pem.Block {
		b, err := os.ReadFile(filepath.Join(data, "keys", name))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM block", name)
		}
		return blk
	}
	ca, err := x509.ParseCertificate(read("nats-ca.crt").Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(read("nats-ca.key").Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "nats-server of the operator's own"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "nats-server.crt"), filepath.Join(dir, "nats-server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
