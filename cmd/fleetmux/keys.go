package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/trust"
)

// keysDir is where a data dir keeps its trust files (trust.RootKeyFile, …).
func keysDir(data string) string { return filepath.Join(data, natsauth.AuthorityDir) }

// loadVerifier reads a node's trust roots (--trust-root, default
// <data>/keys/fleet.pub).
func loadVerifier(path, data, node string) (*trust.Verifier, error) {
	if path == "" {
		path = filepath.Join(keysDir(data), trust.RootPubFile)
	}
	v, err := trust.LoadVerifier(path, trust.VerifierConfig{})
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no trust root at %s: the node checks every request against the fleet's root key; "+
			"run fleetmux enroll node %s on the controller that holds it and install what it writes (or give --trust-root FILE)", path, node)
	}
	return v, err
}

// loadSigner reads a controller's signing key and certificate (--signing-key,
// --signing-cert; defaults under <data>/keys).
func loadSigner(keyPath, certPath, data, name string) (*trust.Signer, error) {
	if keyPath == "" {
		keyPath = filepath.Join(keysDir(data), trust.ControllerKeyFile)
	}
	if certPath == "" {
		certPath = filepath.Join(keysDir(data), trust.ControllerCertFile)
	}
	s, err := trust.LoadSigner(keyPath, certPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no signing key or certificate (%s, %s): nodes refuse unsigned requests; "+
			"run fleetmux enroll controller %s where the fleet root key is (fleetmux controller init makes it) "+
			"and install what it writes (or give --signing-key and --signing-cert)", keyPath, certPath, name)
	}
	return s, err
}

// selfEnroll gives a controller that runs where its fleet's root key lives (its
// data dir after fleetmux controller init, or with an embedded NATS server, which
// makes the root as it makes its own NATS authority) a signing key and certificate
// in <data>/keys when it has none or its certificate nears its end: it could issue
// them anyway.
func selfEnroll(data, name string) error {
	dir := keysDir(data)
	if _, err := os.Stat(filepath.Join(dir, trust.RootKeyFile)); err != nil {
		return nil // the root is elsewhere: the controller was enrolled there
	}
	if !trust.ControllerNeedsCert(dir, name, devCertRenewal) {
		return nil
	}
	return trust.EnrollController(dir, dir, name, 0)
}

// devCertRenewal is how long before its certificate expires `fleetmux dev` issues
// its controller a new one.
const devCertRenewal = 30 * 24 * time.Hour

// devTrust sets up the trust files of `fleetmux dev` in <data>/keys when missing:
// the fleet root (fleet.key 0600, fleet.pub) and the controller's key (0600) and
// certificate issued by it. It returns the controller's signer and the node's
// verifier.
func devTrust(data, controllerName string) (*trust.Signer, *trust.Verifier, error) {
	dir := keysDir(data)
	if _, err := trust.InitRoot(dir); err != nil {
		return nil, nil, err
	}
	if err := selfEnroll(data, controllerName); err != nil {
		return nil, nil, err
	}
	s, err := trust.LoadSigner(filepath.Join(dir, trust.ControllerKeyFile), filepath.Join(dir, trust.ControllerCertFile))
	if err != nil {
		return nil, nil, err
	}
	v, err := trust.LoadVerifier(filepath.Join(dir, trust.RootPubFile), trust.VerifierConfig{})
	if err != nil {
		return nil, nil, err
	}
	return s, v, nil
}
