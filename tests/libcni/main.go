// cnidriver: a tiny runtime that drives the real libcni (Debian's
// golang-github-appc-cni-dev, libcni 1.1.2) so integration tests can run
// wasmcni plugins exactly the way containerd/cri-o would.
//
// Build (offline, Debian packaged sources only):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=/tmp/cnidriver-gocache \
//	    go build -o /tmp/cnidriver ./tests/libcni
//
// See README.md for the CLI.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

func main() {
	var (
		cmd      = flag.String("cmd", "", "add|check|del|version|validate")
		conflist = flag.String("conflist", "", "network configuration list file (.conflist JSON)")
		bindir   = flag.String("bindir", "", "CNI plugin directory (also passed to plugins as CNI_PATH)")
		netns    = flag.String("netns", "", "network namespace path, e.g. /var/run/netns/foo")
		cid      = flag.String("cid", "cnidriver-test", "container ID")
		ifname   = flag.String("ifname", "eth0", "interface name inside the container")
		cachedir = flag.String("cachedir", "", "libcni cache dir (required for add/check/del; never defaults to /var/lib/cni)")
		plugin   = flag.String("plugin", "", "plugin type for -cmd version")
		cniArgs  = flag.String("args", "", "CNI_ARGS as K=V;K2=V2 (optional)")
		capArgs  = flag.String("capargs", "", "capability arguments as a JSON object, e.g. {\"ips\":[\"10.1.0.9/24\"]} (optional)")
		timeout  = flag.Duration("timeout", 60*time.Second, "overall timeout")
		timing   = flag.Bool("timing", false, "print the wall time of the libcni call (add/check/del) to stderr as `cnidriver-elapsed-us: N`")
	)
	flag.Parse()

	if *bindir == "" {
		fail(errors.New("-bindir is required"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	// version/validate never touch the cache; add/check/del refuse to run
	// without -cachedir, so libcni never falls back to /var/lib/cni.
	cni := libcni.NewCNIConfigWithCacheDir([]string{*bindir}, *cachedir, nil)

	switch *cmd {
	case "version":
		if *plugin == "" {
			fail(errors.New("-cmd version needs -plugin TYPE"))
		}
		info, err := cni.GetVersionInfo(ctx, *plugin)
		if err != nil {
			fail(err)
		}
		printJSON(map[string]interface{}{"supportedVersions": info.SupportedVersions()})
		return
	case "add", "check", "del", "validate":
	case "status", "gc":
		fail(fmt.Errorf("-cmd %s: not available in libcni 1.1.2 (no GetStatusNetworkList/GCNetworkList)", *cmd))
	default:
		fail(fmt.Errorf("unknown -cmd %q (want add|check|del|version|validate)", *cmd))
	}

	if *conflist == "" {
		fail(errors.New("-conflist is required"))
	}
	list, err := libcni.ConfListFromFile(*conflist)
	if err != nil {
		fail(err)
	}

	if *cmd == "validate" {
		caps, err := cni.ValidateNetworkList(ctx, list)
		if err != nil {
			fail(err)
		}
		if caps == nil {
			caps = []string{}
		}
		printJSON(map[string]interface{}{"capabilities": caps})
		return
	}

	if *cachedir == "" {
		fail(errors.New("-cachedir is required for add/check/del"))
	}
	rt := &libcni.RuntimeConf{
		ContainerID: *cid,
		NetNS:       *netns,
		IfName:      *ifname,
		Args:        parseArgs(*cniArgs),
	}
	if *capArgs != "" {
		if err := json.Unmarshal([]byte(*capArgs), &rt.CapabilityArgs); err != nil {
			fail(fmt.Errorf("-capargs: %w", err))
		}
	}

	// What a runtime waits for: the libcni call alone, not this process's
	// own start-up.
	start := time.Now()
	elapsed := func() {
		if *timing {
			fmt.Fprintf(os.Stderr, "cnidriver-elapsed-us: %d\n", time.Since(start).Microseconds())
		}
	}
	switch *cmd {
	case "add":
		res, err := cni.AddNetworkList(ctx, list, rt)
		elapsed()
		if err != nil {
			fail(err)
		}
		if res == nil {
			// Can only happen if the last plugin printed nothing parseable.
			fmt.Println("null")
			return
		}
		if err := res.PrintTo(os.Stdout); err != nil {
			fail(err)
		}
		fmt.Println() // PrintTo does not end with a newline
	case "check":
		err := cni.CheckNetworkList(ctx, list, rt)
		elapsed()
		if err != nil {
			fail(err)
		}
	case "del":
		err := cni.DelNetworkList(ctx, list, rt)
		elapsed()
		if err != nil {
			fail(err)
		}
	}
}

func parseArgs(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		parts := strings.SplitN(kv, "=", 2)
		if len(parts) == 1 {
			parts = append(parts, "")
		}
		out = append(out, [2]string{parts[0], parts[1]})
	}
	return out
}

func printJSON(v interface{}) {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

// fail prints the error to stderr and exits 1. If a *types.Error (a plugin's
// structured error) is anywhere in the chain, its JSON is printed as the
// last stderr line, prefixed by "CNI-ERROR: ", so tests can assert on the code.
func fail(err error) {
	fmt.Fprintf(os.Stderr, "cnidriver: %v\n", err)
	var cerr *types.Error
	if errors.As(err, &cerr) {
		b, _ := json.Marshal(cerr)
		fmt.Fprintf(os.Stderr, "CNI-ERROR: %s\n", b)
	}
	os.Exit(1)
}
