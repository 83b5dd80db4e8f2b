package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/transport/gossip"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/trust"
	"github.com/spf13/cobra"
)

// `fleetmux controller init` and `fleetmux enroll`: the fleet's NATS authority and
// the credentials of each process (natsauth.Authority does the work).

func controllerInitCmd() *cobra.Command {
	var data string
	var force bool
	c := &cobra.Command{
		Use:   "init [--data DIR] [--force]",
		Short: "Create the fleet's NATS authority: operator and account keys, and a CA for TLS",
		Long: "init creates, under DIR/keys/ (keys 0600), the NATS operator, the fleet account and\n" +
			"the system account, and a CA (ECDSA P-256) that signs the embedded NATS servers'\n" +
			"TLS certificates. Then `fleetmux enroll` issues each process its credentials, and\n" +
			"`fleetmux controller --data DIR` runs the embedded NATS server with them.\n" +
			"It refuses to replace an existing authority unless --force (which invalidates\n" +
			"every NATS credential issued before; the fleet root key is kept).",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := datadir.Ensure(data); err != nil {
				return err
			}
			a, err := natsauth.InitAuthority(data, force)
			if err != nil {
				return err
			}
			// The fleet root that certifies the controllers' signing keys (kept when
			// it exists: nodes trust it).
			keys := filepath.Join(data, natsauth.AuthorityDir)
			if _, err := trust.InitRoot(keys); err != nil {
				return err
			}
			// The gossip key (kept when it exists: the members use it).
			if _, err := gossip.EnsureKey(data); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "fleet authority created in %s\n  NATS account %s\n  NATS CA      %s\n  fleet root   %s\n  gossip key   %s\nnext: fleetmux enroll node|controller|subscriber NAME --data %s\n",
				keys, a.Account(), filepath.Join(keys, natsauth.CACertFile), filepath.Join(keys, trust.RootPubFile), gossip.KeyPath(data), data)
			return nil
		},
	}
	c.Flags().StringVar(&data, "data", ".fleetmux-controller", "data directory of the controller")
	c.Flags().BoolVar(&force, "force", false, "replace an existing authority (every credential issued before stops working)")
	return c
}

// enrollOptions are the flags of `fleetmux enroll`.
type enrollOptions struct {
	data     string
	out      string
	nodes    []string
	prefix   string
	printJWT bool
}

func enrollCmd() *cobra.Command {
	var o enrollOptions
	c := &cobra.Command{
		Use:   "enroll node|controller|subscriber NAME [--nodes a,b] [--data DIR] [--out FILE] [--print-jwt]",
		Short: "Issue a process its NATS credentials (a .creds file with the CA)",
		Long: "enroll issues NAME its own NATS user, signed by the fleet account made by\n" +
			"`fleetmux controller init` (--data), and writes a .creds file (mode 0600): the user\n" +
			"JWT, its nkey seed, and the fleet's CA certificate. Next to it, FILE.keys/ (0700)\n" +
			"holds what goes into that process's DIR/keys/: for a node the fleet root's public\n" +
			"key (fleet.pub: the node trusts requests signed under it), for a controller its\n" +
			"request-signing key (controller.key, 0600) and certificate (controller.cert).\n" +
			"Its NATS permissions:\n" +
			"  node NAME        serve <prefix>.rpc.NAME.>, publish its own out/block/event/\n" +
			"                   audit/approval subjects, read the policy bucket\n" +
			"  controller NAME  request <prefix>.rpc.>, read every node's subjects, the KV\n" +
			"                   buckets and streams\n" +
			"  subscriber NAME  read out/block/event (of --nodes only, when given), consume the\n" +
			"                   streams; never rpc\n" +
			"--print-jwt also prints the nats-server configuration that trusts the fleet's\n" +
			"accounts and the user's permissions, for a NATS server of one's own.",
		Example: "  fleetmux enroll node web-1 --data /etc/fleetmux --out web-1.creds\n" +
			"  fleetmux enroll subscriber dash --nodes web-1,web-2",
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error { return o.run(args[0], args[1], c.OutOrStdout()) },
	}
	f := c.Flags()
	f.StringVar(&o.data, "data", ".fleetmux-controller", "data directory where `fleetmux controller init` ran")
	f.StringVar(&o.out, "out", "", "the .creds file to write (default KIND-NAME.creds)")
	f.StringSliceVar(&o.nodes, "nodes", nil, "subscriber: only these nodes' subjects")
	f.StringVar(&o.prefix, "prefix", api.DefaultPrefix, "NATS subject prefix")
	f.BoolVar(&o.printJWT, "print-jwt", false, "also print the account and user JWTs and the permissions (for a NATS server of your own)")
	return c
}

func (o *enrollOptions) run(kind, name string, stdout io.Writer) error {
	id := natsauth.Identity{Kind: kind, Name: name, Nodes: o.nodes, Prefix: o.prefix}
	if err := id.Validate(); err != nil {
		return usageError("%v", err)
	}
	a, err := natsauth.LoadAuthority(o.data)
	if err != nil {
		return err
	}
	creds, err := a.Issue(id)
	if err != nil {
		return err
	}
	out := o.out
	if out == "" {
		out = kind + "-" + name + ".creds"
	}
	if err := natsauth.WriteCreds(out, creds); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s %s; keep it secret: it is this identity)\n", out, kind, name)
	keys := filepath.Join(o.data, natsauth.AuthorityDir)
	bundle := strings.TrimSuffix(out, ".creds") + ".keys"
	switch kind {
	case natsauth.KindNode:
		pub, err := trust.ReadPublicKey(filepath.Join(keys, trust.RootPubFile))
		if err != nil {
			return fmt.Errorf("the fleet root's public key: %w (run fleetmux controller init)", err)
		}
		if err := os.MkdirAll(bundle, 0o700); err != nil {
			return err
		}
		if err := datadir.WriteFile(filepath.Join(bundle, trust.RootPubFile), trust.EncodePublicKey(pub), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (the fleet root the node trusts: install it as the node's DIR/keys/%s or give --trust-root)\n",
			filepath.Join(bundle, trust.RootPubFile), trust.RootPubFile)
	case natsauth.KindController:
		if err := trust.EnrollController(keys, bundle, name, 0); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s (its request-signing key and certificate: install them in the controller's DIR/keys/)\n",
			filepath.Join(bundle, trust.ControllerKeyFile), filepath.Join(bundle, trust.ControllerCertFile))
	}
	if kind == natsauth.KindNode || kind == natsauth.KindController {
		// Gossip's key, in a file (never a flag): install it as DIR/keys/gossip.key
		// or give --gossip-key-file.
		gkey, err := gossip.ReadKey(gossip.KeyPath(o.data))
		if err != nil {
			return fmt.Errorf("%w (run fleetmux controller init)", err)
		}
		gpath := filepath.Join(bundle, gossip.KeyFile)
		_ = os.Remove(gpath) // a new enrollment replaces what the last one wrote
		if err := gossip.WriteKey(gpath, gkey); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (the gossip key, 0600: install it as DIR/keys/%s or give --gossip-key-file)\n", gpath, gossip.KeyFile)
	}
	if !o.printJWT {
		return nil
	}
	conf, err := a.ServerConf()
	if err != nil {
		return err
	}
	perms, err := id.Permissions()
	if err != nil {
		return err
	}
	var pj bytes.Buffer
	enc := json.NewEncoder(&pj)
	enc.SetEscapeHTML(false) // subjects end in >
	enc.SetIndent("", "  ")
	if err := enc.Encode(perms); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%s\n# user JWT of %s %s (also in %s)\n%s\n\n# its permissions\n%s\n# its inbox prefix (nats CLI --inbox-prefix, nats.js inboxPrefix)\n%s\n",
		strings.TrimSpace(conf), kind, name, out, creds.JWT, pj.String(), id.Inbox())
	return nil
}

// devCreds issues the identities of a one-machine setup (fleetmux dev, a node with
// its own embedded server) and writes them to data/creds/{node,controller,
// subscriber}.creds (0600), for other NATS clients.
func devCreds(a *natsauth.Authority, data, prefix, nodeName, controllerName string) (node, ctl *natsauth.Creds, err error) {
	dir := filepath.Join(data, "creds")
	if err := datadir.Mkdir(dir); err != nil {
		return nil, nil, err
	}
	ids := map[string]natsauth.Identity{
		"node":       {Kind: natsauth.KindNode, Name: nodeName, Prefix: prefix},
		"controller": {Kind: natsauth.KindController, Name: controllerName, Prefix: prefix},
		"subscriber": {Kind: natsauth.KindSubscriber, Name: "subscriber", Prefix: prefix},
	}
	issued := map[string]*natsauth.Creds{}
	for file, id := range ids {
		c, err := a.Issue(id)
		if err != nil {
			return nil, nil, err
		}
		if err := natsauth.WriteCreds(filepath.Join(dir, file+".creds"), c); err != nil {
			return nil, nil, err
		}
		issued[file] = c
	}
	return issued["node"], issued["controller"], nil
}

// openAuthority loads the fleet's authority under data, or makes it there (a
// controller embedding NATS, fleetmux dev, a node with its own server) together
// with the fleet root key, as `controller init` does, so that `enroll` works with
// that data dir.
func openAuthority(data string) (*natsauth.Authority, error) {
	a, err := natsauth.OpenAuthority(data)
	if err != nil {
		return nil, err
	}
	if _, err := trust.InitRoot(filepath.Join(data, natsauth.AuthorityDir)); err != nil {
		return nil, err
	}
	return a, nil
}
