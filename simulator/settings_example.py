"""The simulator's settings file spelled out with every default and a comment on each key
(`paigraph` writes it as a starting point to edit); kept apart from the settings' model so
each stays short."""


def example_settings_yaml() -> str:
    """A commented settings file that spells out every default; a starting point to edit."""
    return _EXAMPLE


_EXAMPLE = """\
# Settings of the paigraph local cluster simulator.
# Use this file with:  PAIGRAPH_SIMULATOR_CONFIG=/path/to/this.yaml paigraph run job.yaml
# Every key is optional; the values below are the built-in defaults.

# Simulated capacity: 4 nodes named node-0 .. node-3, each with 8 GPUs. Requests are
# accounted against these numbers; each container's real limits are its request scaled to
# what this machine has (a warning on the job says what was capped).
node_count: 4
node:
  cpu: 32
  memory_mb: 262144
  # gpu: 2            # simulated GPUs of each of these nodes (default: gpus_per_node)

# Or list the nodes one by one instead of node_count / node:
# nodes:
#   - {name: big, cpu: 32, memory_mb: 131072, gpu: 4}
#   - {name: small, cpu: 8, memory_mb: 16384}

# Simulated GPUs of a node that does not say otherwise, so GPU jobs run anywhere
# (0: a cluster without GPUs, which refuses jobs that ask for one).
gpus_per_node: 8
# On a machine where `nvidia-smi -L` lists GPUs, the first node gets exactly those devices.
use_host_gpus: true

# Virtual clusters: a share of the whole cluster in percent, or absolute numbers.
virtual_clusters:
  - name: default
    share: 100
#  - name: research
#    cpu: 16
#    memory_mb: 65536
#    gpu: 0

# Host ports for the instances: start inclusive, end exclusive.
port_range:
  start: 15000
  end: 40000
# The address those ports are published on: 127.0.0.1 is this machine only; 0.0.0.0 opens
# every job's ports to the network.
publish_address: 127.0.0.1

# Where logs and the shared held-port table are kept
# (default: $XDG_DATA_HOME/paigraph/simulator or ~/.local/share/paigraph/simulator;
# the environment variable PAIGRAPH_SIMULATOR_STATE overrides it).
# state_dir: ~/.local/share/paigraph/simulator

# Host directories file:// prerequisites may read from (none: file:// is refused).
allowed_file_roots: []

# Most processes per container.
pids_limit: 1024
# Seconds between SIGTERM and SIGKILL when an instance is stopped.
stop_grace_seconds: 10
# Most output one instance's log keeps, in MB: past it, its first and last halves.
log_limit_mb: 256
# Pull a missing image from a registry (false: report it as a start failure).
image_pull: false

# Non-public networks and host names data downloads may reach (none: only public addresses;
# PAIGRAPH_ALLOWED_FETCH_NETWORKS, comma-separated, overrides this), e.g. [10.0.0.0/8, minio.lan]
allowed_fetch_networks: []

# URL prefixes fetched from elsewhere (a local copy for an offline machine), longest first;
# e.g. {"https://github.com/": "file:///srv/git/github/"} (file:// under allowed_file_roots).
fetch_mirrors: {}

# The simulated default file system (PAI_DEFAULT_FS_URI); every hdfs://host:port a job names is
# simulated under <state_dir>/dfs, one tree per host:port and user.
default_fs_uri: hdfs://paigraph-dfs:9000
# Most one user's tree of one simulated file system may hold, in MB.
dfs_max_mb: 10240
"""
