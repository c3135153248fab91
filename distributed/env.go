package distributed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/torchfit/torchfit/torch"
)

// Env is torchrun's contract with the processes it starts: where this
// process stands (RANK of WORLD_SIZE, LOCAL_RANK of LOCAL_WORLD_SIZE on its
// machine) and where rank 0's store listens (MASTER_ADDR:MASTER_PORT).
// AgentStore is set when the launcher itself hosts the store
// (TORCHELASTIC_USE_AGENT_STORE=True: torchrun and `torchfit launch`);
// Attempt is the launcher's restart count (TORCHELASTIC_RESTART_COUNT).
type Env struct {
	Rank, World           int
	LocalRank, LocalWorld int
	MasterAddr            string
	MasterPort            int
	AgentStore            bool
	Attempt               int
}

// Environment variable names (torchrun's).
const (
	EnvRank        = "RANK"
	EnvWorldSize   = "WORLD_SIZE"
	EnvLocalRank   = "LOCAL_RANK"
	EnvLocalWorld  = "LOCAL_WORLD_SIZE"
	EnvMasterAddr  = "MASTER_ADDR"
	EnvMasterPort  = "MASTER_PORT"
	EnvAgentStore  = "TORCHELASTIC_USE_AGENT_STORE"
	EnvRestarts    = "TORCHELASTIC_RESTART_COUNT"
	EnvGlooIface   = "GLOO_SOCKET_IFNAME"
	EnvDistTimeout = "TORCHFIT_DIST_TIMEOUT" // a Go duration (90s, 5m): Options.Timeout
)

// ReadEnv reads the distributed environment from getenv (os.Getenv when
// nil). ok is false when WORLD_SIZE is not set: a single process. A set but
// malformed variable is a *UsageError.
func ReadEnv(getenv func(string) string) (env Env, ok bool, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if getenv(EnvWorldSize) == "" {
		return Env{}, false, nil
	}
	ok = true
	num := func(name string, def int, min int) (int, error) {
		s := getenv(name)
		if s == "" {
			if def < 0 {
				return 0, usagef("%s is not set (%s is)", name, EnvWorldSize)
			}
			return def, nil
		}
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < min {
			return 0, usagef("%s=%q is not an integer >= %d", name, s, min)
		}
		return v, nil
	}
	if env.World, err = num(EnvWorldSize, -1, 1); err != nil {
		return
	}
	if env.Rank, err = num(EnvRank, -1, 0); err != nil {
		return
	}
	if env.Rank >= env.World {
		return env, true, usagef("%s=%d is not below %s=%d", EnvRank, env.Rank, EnvWorldSize, env.World)
	}
	if env.LocalRank, err = num(EnvLocalRank, env.Rank, 0); err != nil {
		return
	}
	if env.LocalWorld, err = num(EnvLocalWorld, env.World, 1); err != nil {
		return
	}
	env.MasterAddr = strings.TrimSpace(getenv(EnvMasterAddr))
	if env.MasterAddr == "" {
		env.MasterAddr = "127.0.0.1"
	}
	if env.MasterPort, err = num(EnvMasterPort, -1, 1); err != nil {
		return
	}
	if env.MasterPort > 65535 {
		return env, true, usagef("%s=%d is not a port", EnvMasterPort, env.MasterPort)
	}
	env.AgentStore = getenv(EnvAgentStore) == "True"
	if env.AgentStore {
		if env.Attempt, err = num(EnvRestarts, 0, 0); err != nil {
			return
		}
	}
	return env, true, nil
}

// Vars returns the environment variables that describe env (what a
// launcher sets for each rank).
func (e Env) Vars() []string {
	vs := []string{
		EnvRank + "=" + strconv.Itoa(e.Rank),
		EnvWorldSize + "=" + strconv.Itoa(e.World),
		EnvLocalRank + "=" + strconv.Itoa(e.LocalRank),
		EnvLocalWorld + "=" + strconv.Itoa(e.LocalWorld),
		EnvMasterAddr + "=" + e.MasterAddr,
		EnvMasterPort + "=" + strconv.Itoa(e.MasterPort),
	}
	if e.AgentStore {
		vs = append(vs, EnvAgentStore+"=True", EnvRestarts+"="+strconv.Itoa(e.Attempt))
	}
	return vs
}

// OptionsFromEnv completes opt from the environment: the timeout from
// TORCHFIT_DIST_TIMEOUT and the interface from GLOO_SOCKET_IFNAME, when
// opt leaves them unset.
func OptionsFromEnv(opt Options, getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if opt.Timeout == 0 {
		if s := getenv(EnvDistTimeout); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return opt, usagef("%s=%q is not a positive duration (90s, 5m)", EnvDistTimeout, s)
			}
			opt.Timeout = d
		}
	}
	if opt.Interface == "" {
		opt.Interface = getenv(EnvGlooIface)
	}
	return opt, nil
}

// Init joins the process group env describes, as torch.distributed's
// init_process_group does with init_method="env://", so that Go and
// Python ranks can share a group:
//
//   - the store: the launcher's (AgentStore: every rank a client, keys
//     under "/worker/attempt_N"), or else one rank 0 hosts — a StoreServer
//     bound to MASTER_ADDR, which must then be an address of rank 0's
//     machine (c10d's own server would listen on every interface);
//   - the group where the Python of the same libtorch puts it (groupPrefix),
//     then on 1.13 the store-based barrier, and the group's sequence
//     number, as Python does.
//
// Gloo binds to the address from which this machine reaches MASTER_ADDR
// (loopback for a loopback MASTER_ADDR), or to Options.Interface.
func Init(env Env, opt Options) (g *Group, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Host == "" && opt.Interface == "" {
		if opt.Host, err = localAddrFor(env.MasterAddr, env.MasterPort); err != nil {
			return nil, usagef("%s=%s: %v", EnvMasterAddr, env.MasterAddr, err)
		}
	}
	var server *StoreServer
	defer func() {
		if err != nil && server != nil {
			server.Close()
		}
	}()
	if !env.AgentStore && env.Rank == 0 {
		server, err = ListenStore(net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort)))
		if err != nil {
			return nil, usagef("rank 0 hosts the store on %s=%s %s=%d: %v (MASTER_ADDR must be an address of this machine, the port free)",
				EnvMasterAddr, env.MasterAddr, EnvMasterPort, env.MasterPort, err)
		}
	}
	base, err := NewTCPStore(env.MasterAddr, env.MasterPort, env.World, opt.Timeout)
	if err != nil {
		return nil, withRank(err, env.Rank)
	}
	store := base
	if env.AgentStore {
		if store, err = base.Prefix(fmt.Sprintf("/worker/attempt_%d", env.Attempt)); err != nil {
			return nil, err
		}
	}
	pgStore, err := store.Prefix("default_pg")
	if err != nil {
		return nil, err
	}
	major, _, _ := torch.LibtorchVersion()
	v1 := major < 2
	groupStore, err := groupPrefix(pgStore, v1, opt.Backend)
	if err != nil {
		return nil, err
	}
	g, err = NewGroup(groupStore, env.Rank, env.World, opt)
	if err != nil {
		return nil, err
	}
	g.env = env
	g.server = server
	if v1 {
		if err := pgStore.barrier("store_based_barrier_key:1", env.World, opt.Timeout); err != nil {
			g.Close()
			return nil, withRank(err, env.Rank)
		}
	}
	if err := g.call("rendezvous", func(h cGroup) cErr { return setSequenceNumber(h) }); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// groupPrefix is where torch.distributed's init_process_group puts the
// default group's backend in the store: PrefixStore("0") on libtorch 1.13
// (keys "default_pg/0/…"); on 2.x PrefixStore("0/") and then the device's,
// "cpu/" for Gloo or "cuda/" for NCCL (keys "default_pg/0//cpu//…"), and no
// store-based barrier after it unless TORCH_DIST_INIT_BARRIER=1.
func groupPrefix(pg *Store, v1 bool, backend Backend) (*Store, error) {
	if v1 {
		return pg.Prefix("0")
	}
	group, err := pg.Prefix("0/")
	if err != nil {
		return nil, err
	}
	device := "cpu/"
	if backend == NCCL {
		device = "cuda/"
	}
	return group.Prefix(device)
}

// InitFromEnv is Init on the environment torchrun (or `torchfit launch`)
// set, with OptionsFromEnv; ok is false when WORLD_SIZE is not set.
func InitFromEnv(opt Options) (g *Group, ok bool, err error) {
	env, ok, err := ReadEnv(nil)
	if err != nil || !ok {
		return nil, ok, err
	}
	if opt, err = OptionsFromEnv(opt, nil); err != nil {
		return nil, true, err
	}
	g, err = Init(env, opt)
	return g, true, err
}

func withRank(err error, rank int) error {
	var e *Error
	if errors.As(err, &e) && e.Rank < 0 {
		e.Rank = rank
	}
	return err
}

// localAddrFor returns this machine's address on the route to host (no
// packet is sent: a UDP socket is only connected): loopback for a loopback
// host.
func localAddrFor(host string, port int) (string, error) {
	ips, err := net.LookupIP(host)
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("no address for %s", host)
	}
	ip := ips[0]
	for _, x := range ips {
		if x.To4() != nil {
			ip = x
			break
		}
	}
	if ip.IsLoopback() {
		if ip.To4() != nil {
			return "127.0.0.1", nil
		}
		return "::1", nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
