//! Real MPI launchers through `mn-ssh`: Open MPI's `plm_rsh_agent` (tree
//! spawn on) and MPICH's `-launcher-exec`, across agents on loopback addresses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

pub(crate) fn compile(compiler: &str, dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mpi_allreduce.c");
    let status = Command::new(compiler)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!("{compiler} (Debian packages libopenmpi-dev, libmpich-dev): {e}")
        });
    assert!(status.success(), "{compiler} failed");
    out
}

/// Agents on fresh loopback addresses, each marked with AGENT_ID=its address.
fn agents(n: usize, port: u16) -> Vec<Agent> {
    fresh_loopbacks(n)
        .iter()
        .map(|h| Agent::start_with(h, port, &[], &[("AGENT_ID", h)]))
        .collect()
}

/// Checks the program's lines: every rank once, the right sum, one rank per agent.
fn check_ranks(output: &str, agents: &[Agent]) {
    let n = agents.len();
    let expected_sum = n * (n - 1) / 2;
    let lines: Vec<&str> = output.lines().filter(|l| l.starts_with("rank=")).collect();
    assert_eq!(lines.len(), n, "{output}");
    let mut ranks = BTreeSet::new();
    let mut seen_agents = BTreeSet::new();
    for line in lines {
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {line}"))
                .to_string()
        };
        ranks.insert(field("rank").parse::<usize>().unwrap());
        assert_eq!(field("size"), n.to_string(), "{line}");
        assert_eq!(field("sum"), expected_sum.to_string(), "{line}");
        seen_agents.insert(field("agent"));
    }
    assert_eq!(ranks, (0..n).collect::<BTreeSet<_>>());
    let want: BTreeSet<String> = agents.iter().map(|a| a.host.clone()).collect();
    assert_eq!(seen_agents, want, "every rank must run under its own agent");
}

#[test]
fn open_mpi_mpirun_with_mn_ssh_as_plm_rsh_agent_and_tree_spawn() {
    let dir = tempfile::tempdir().unwrap();
    let prog = compile("mpicc.openmpi", dir.path(), "allreduce_ompi");
    let port = 29930;
    let agents = agents(4, port);
    let hosts = agents
        .iter()
        .map(|a| format!("{}:1", a.host))
        .collect::<Vec<_>>()
        .join(",");
    // The agent string: log who called it (mpirun, or a remote orted: tree spawn), then mn-ssh.
    let log = dir.path().join("callers.log");
    let wrapper = dir.path().join("agent.sh");
    let script = format!(
        "#!/bin/sh\necho \"$(cat /proc/$PPID/comm)\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        mn_ssh().display()
    );
    std::fs::write(&wrapper, script).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&wrapper, mode).unwrap();
    let out = cmd(Path::new("mpirun.openmpi"))
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-H", &hosts, "-np", "4"])
        .args(["--mca", "plm_rsh_agent"])
        .arg(&wrapper)
        // A radix of 1 forces a deep tree: remote orteds launch the next nodes through mn-ssh themselves.
        .args(["--mca", "routed_radix", "1"])
        .args([
            "--mca",
            "btl",
            "self,tcp",
            "--mca",
            "btl_tcp_if_include",
            "lo",
        ])
        .args(["--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1"])
        // Several orteds on one machine share a session directory and its
        // hwloc.sm; written at once it can crash one (docs/mpi.md).
        .args(["--mca", "rtc_hwloc_vmhole", "none"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mpirun failed: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    check_ranks(&stdout(&out), &agents);
    let callers = std::fs::read_to_string(&log).unwrap();
    assert_eq!(callers.lines().count(), 4, "one launch per node: {callers}");
    assert!(
        callers.lines().any(|c| c.starts_with("orted")),
        "tree spawn: a remote orted must launch through mn-ssh too: {callers}"
    );
}

#[test]
fn mpich_mpiexec_with_mn_ssh_as_launcher_exec() {
    let dir = tempfile::tempdir().unwrap();
    let prog = compile("mpicc.mpich", dir.path(), "allreduce_mpich");
    let port = 29931;
    let agents = agents(3, port);
    let hosts = agents
        .iter()
        .map(|a| a.host.clone())
        .collect::<Vec<_>>()
        .join(",");
    let out = cmd(Path::new("mpiexec.mpich"))
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .args(["-launcher", "ssh", "-launcher-exec"])
        .arg(mn_ssh())
        .args(["-iface", "lo", "-hosts", &hosts, "-n", "3"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mpiexec failed: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    check_ranks(&stdout(&out), &agents);
}
