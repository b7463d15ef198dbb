//! Real MPI launchers through `mn-ssh`: Open MPI's `plm_rsh_agent` (tree
//! spawn on) and MPICH's `-launcher-exec`, across agents on loopback addresses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// Agents on fresh loopback addresses, each marked with AGENT_ID=its
/// address, each with a TMPDIR of its own under `dir`: Open MPI's daemons on
/// one host race to create one session directory otherwise (docs/mpi.md).
fn agents(n: usize, port: u16, dir: &Path) -> Vec<Agent> {
    fresh_loopbacks(n)
        .iter()
        .map(|h| {
            let tmp = dir.join(format!("tmp-{h}"));
            std::fs::create_dir(&tmp).unwrap();
            let tmp = tmp.to_str().expect("a UTF-8 path");
            Agent::start_with(h, port, &[], &[("AGENT_ID", h), ("TMPDIR", tmp)])
        })
        .collect()
}

/// An executable script at `path`.
fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(path, mode).unwrap();
}

/// Open MPI's mpirun over `agents` (one slot each), with `wrapper` as its
/// `plm_rsh_agent`, on loopback; the program and any more options follow.
fn open_mpi(agents: &[Agent], wrapper: &Path) -> Command {
    let hosts = agents
        .iter()
        .map(|a| format!("{}:1", a.host))
        .collect::<Vec<_>>()
        .join(",");
    let mut mpirun = cmd(Path::new("mpirun.openmpi"));
    mpirun
        .env("MULTINODE_AGENT_PORT", agents[0].port.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-H", &hosts, "-np", &agents.len().to_string()])
        .args(["--mca", "plm_rsh_agent"])
        .arg(wrapper)
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
        .args(["--mca", "rtc_hwloc_vmhole", "none"]);
    mpirun
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
    let agents = agents(4, 29930, dir.path());
    // The agent string: log who called it (mpirun, or a remote orted: tree spawn), then mn-ssh.
    let log = dir.path().join("callers.log");
    let wrapper = dir.path().join("agent.sh");
    write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\necho \"$(cat /proc/$PPID/comm)\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            mn_ssh().display()
        ),
    );
    let out = open_mpi(&agents, &wrapper)
        // A radix of 1 forces a deep tree: remote orteds launch the next nodes through mn-ssh themselves.
        .args(["--mca", "routed_radix", "1"])
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
    let agents = agents(3, port, dir.path());
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

/// A successful mpirun prints no error when the agents are stopped as soon
/// as it exits, as bench/gpu/run.sh stops them. mpirun exits once its
/// daemons are done, while each `mn-ssh` that started one may still wait for
/// that session's end; an agent that stops ends the session's command and
/// says how (SIGTERM: mn-ssh exits 143, silently). An agent that closed the
/// channel without an exit status instead made mn-ssh print `connection to
/// 127.0.0.2:29922 lost: the channel closed without an exit status` on an
/// H200 run. The wrapper keeps each session open 3 s past its daemon, so
/// the stop always finds it open.
#[test]
fn agents_stopped_right_after_a_successful_mpirun_leave_mn_ssh_nothing_to_report() {
    let dir = tempfile::tempdir().unwrap();
    let prog = compile("mpicc.openmpi", dir.path(), "allreduce_ompi");
    let agents = agents(2, 29932, dir.path());
    let ends = dir.path().join("mn-ssh-ends.log");
    let wrapper = dir.path().join("agent.sh");
    write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\n'{}' \"$@\" '; sleep 3'\necho \"exit $?\" >> '{}'\n",
            mn_ssh().display(),
            ends.display()
        ),
    );
    // Files, not pipes: the wrappers outlive mpirun and keep its streams.
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut mpirun = open_mpi(&agents, &wrapper)
        .arg(&prog)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let code = wait_exit(&mut mpirun, Duration::from_secs(60));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert_eq!(code, Some(0), "mpirun: {}\n{}", read(&out), read(&err));
    check_ranks(&read(&out), &agents);
    // Stopped at once (SIGTERM), each waiting for its commands to end.
    drop(agents);
    assert!(
        eventually(Duration::from_secs(15), || read(&ends).lines().count() == 2),
        "both wrappers end: {}",
        read(&ends)
    );
    assert_eq!(
        read(&ends),
        "exit 143\nexit 143\n",
        "the stop found both sessions open and ended them: {}",
        read(&err)
    );
    assert!(!read(&err).contains("mn-ssh: error"), "{}", read(&err));
}
