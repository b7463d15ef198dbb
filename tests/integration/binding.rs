//! `multinode bind` as its users run it: the real binary against a fixture
//! sysfs tree (`MULTINODE_SYSFS_ROOT`, for tests) and a fake `nvidia-smi`
//! printing tests/fixtures/nvidia-smi/h200-8gpu/pci.csv, checked through the
//! exec'd program's own `/proc/self/status`; under Open MPI's `mpirun` and
//! MPICH's hydra; bad input; docs/binding.md's example as written.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::runner::{BIN, Output, run, run_usage_error};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/nvidia-smi/h200-8gpu"
);

/// NUMA node 0's and node 1's CPUs in the fixture: the even GPUs sit on
/// node 1, the odd ones on node 0 (GPU order is not NUMA order), each node
/// holding one of this machine's first two CPUs and some it does not have.
const NODE_CPUS: [&str; 2] = ["0,16-23", "1,8-15"];

/// A fake `nvidia-smi` and a sysfs tree of 8 GPUs on 2 NUMA nodes.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let put = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, format!("{text}\n")).expect("write");
        };
        put("sys/devices/system/node/has_cpu", "0-1");
        for (n, cpus) in NODE_CPUS.iter().enumerate() {
            put(&format!("sys/devices/system/node/node{n}/cpulist"), cpus);
        }
        let csv = std::fs::read_to_string(Path::new(FIXTURE).join("pci.csv")).expect("pci.csv");
        for (i, line) in csv.lines().enumerate() {
            let bus = line.rsplit(", ").next().expect("a bus id");
            // `00000000:18:00.0` as sysfs names it.
            let dev = format!("sys/bus/pci/devices/{}", bus[4..].to_ascii_lowercase());
            let node = (i + 1) % 2;
            put(&format!("{dev}/numa_node"), &node.to_string());
            put(&format!("{dev}/local_cpulist"), NODE_CPUS[node]);
        }
        let bin = dir.path().join("bin/nvidia-smi");
        std::fs::create_dir_all(bin.parent().expect("bin")).expect("mkdir");
        std::fs::write(
            &bin,
            format!(
                "#!/bin/sh\ncase \"$*\" in\n*--query-gpu=index,uuid,pci.bus_id*) exec cat '{FIXTURE}/pci.csv' ;;\nesac\nexit 1\n"
            ),
        )
        .expect("write fake nvidia-smi");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Fixture { dir }
    }

    fn path(&self) -> String {
        format!("{}/bin:/usr/bin:/bin", self.dir.path().display())
    }

    fn sysfs(&self) -> String {
        self.dir.path().join("sys").display().to_string()
    }
}

/// A CPU list (`0-1,4`) as a set.
fn cpus(list: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => {
                out.insert(part.parse().unwrap());
            }
        }
    }
    out
}

/// `Cpus_allowed_list` of a `/proc/PID/status` text.
fn allowed_in(status: &str) -> BTreeSet<u32> {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status:?}"));
    cpus(line)
}

/// The CPUs this test process may use: what `multinode bind` starts with.
fn this_machines_cpus() -> BTreeSet<u32> {
    allowed_in(&std::fs::read_to_string("/proc/self/status").expect("status"))
}

fn bind(f: &Fixture, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let (path, sysfs) = (f.path(), f.sysfs());
    let mut all = vec![
        ("PATH", path.as_str()),
        ("MULTINODE_SYSFS_ROOT", sysfs.as_str()),
    ];
    all.extend_from_slice(vars);
    let mut full = vec!["bind"];
    full.extend_from_slice(args);
    run(&full, &all)
}

#[test]
fn bind_numa_narrows_the_execd_program_to_its_gpus_node_within_this_machines_cpus() {
    let f = Fixture::new();
    let host = crate::runner::hostname();
    for local_rank in [0usize, 1] {
        let node = (local_rank + 1) % 2;
        let want: BTreeSet<u32> = cpus(NODE_CPUS[node])
            .intersection(&this_machines_cpus())
            .copied()
            .collect();
        let rank = local_rank.to_string();
        let out = bind(
            &f,
            &[
                "--bind",
                "numa",
                "--report-bindings",
                "--",
                "sh",
                "-c",
                "grep Cpus_allowed_list /proc/self/status",
            ],
            &[("LOCAL_RANK", &rank), ("LOCAL_WORLD_SIZE", "2")],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one report line: {out:?}");
        let bus = ["0000:18:00.0", "0000:2a:00.0"][local_rank];
        let prefix = format!(
            "multinode bind: local rank {local_rank} on {host}: GPU {local_rank} ({bus}), NUMA node {node}: "
        );
        assert!(lines[0].starts_with(&prefix), "{lines:?}");
        if want.is_empty() {
            assert!(
                lines[0].contains(": unbound (none of NUMA node"),
                "{lines:?}"
            );
            assert_eq!(allowed_in(&out.stdout), this_machines_cpus());
        } else {
            assert_eq!(allowed_in(&out.stdout), want, "{out:?}");
            assert!(lines[0].contains(" [numa]"), "{lines:?}");
        }
    }
}

/// The exec'd program is the process `multinode bind` was: no parent left
/// between it and its launcher, its exit code and its death by a signal the
/// launcher's to see, and its memory preferred on its GPU's node.
#[test]
fn bind_execs_in_place_with_memory_preferred() {
    use std::os::unix::process::ExitStatusExt;
    let f = Fixture::new();
    let vars = [
        ("PATH", f.path()),
        ("MULTINODE_SYSFS_ROOT", f.sysfs()),
        ("LOCAL_RANK", "1".into()),
    ];
    let spawn = |script: &str| {
        let child = Command::new(BIN)
            .args(["bind", "--bind", "numa", "--", "sh", "-c", script])
            .env_clear()
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("multinode bind");
        let pid = child.id();
        (pid, child.wait_with_output().expect("wait"))
    };
    let (pid, out) = spawn("echo $$");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pid.to_string());
    assert_eq!(spawn("exit 7").1.status.code(), Some(7));
    assert_eq!(spawn("kill -TERM $$").1.status.signal(), Some(15));

    // get_mempolicy(2) from the exec'd program: MPOL_PREFERRED (1) on node 0,
    // GPU 1's node in the fixture (this machine's only one).
    let probe = "import ctypes, os\n\
        number = {'x86_64': 239, 'aarch64': 236}[os.uname().machine]\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        mode, mask = ctypes.c_int(), (ctypes.c_ulong * 16)()\n\
        assert libc.syscall(number, ctypes.byref(mode), mask, 1025, None, 0) == 0\n\
        print(mode.value, mask[0])\n";
    let script = format!("exec python3 -c \"{probe}\"");
    let (_, out) = spawn(&script);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1 1");
}

#[test]
fn bind_under_open_mpis_mpirun_reads_its_local_rank() {
    // --bind-to none: mpirun binds its ranks to a core each by default,
    // which `multinode bind` would then stay within.
    let mut mpirun = Command::new("mpirun.openmpi");
    mpirun.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        "2",
    ]);
    under_mpi(mpirun, "OMPI_COMM_WORLD_LOCAL_RANK");
}

#[test]
fn bind_under_mpichs_hydra_reads_its_local_rank() {
    let mut mpiexec = Command::new("mpiexec.mpich");
    mpiexec.args(["-n", "2"]);
    under_mpi(mpiexec, "MPI_LOCALRANKID");
}

/// `launcher` (2 processes) runs `multinode bind --report-bindings` on the
/// fixture: each process reports its GPU (the one of its local rank, as
/// `rank_var` gives it) and runs on its GPU's node's CPUs within this machine's.
fn under_mpi(mut launcher: Command, rank_var: &str) {
    let f = Fixture::new();
    let machine = this_machines_cpus();
    let out = launcher
        .args([BIN, "bind", "--report-bindings", "--", "sh", "-c"])
        .arg(format!(
            "echo \"${rank_var} $(grep Cpus_allowed_list /proc/self/status)\""
        ))
        .env_clear()
        .env("PATH", f.path())
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        )
        .env("MULTINODE_SYSFS_ROOT", f.sysfs())
        .output()
        .expect("mpirun.openmpi, mpiexec.mpich (Debian packages openmpi-bin, mpich)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    let mut seen = Vec::new();
    for line in stdout.lines() {
        let (rank, status) = line.split_once(' ').expect("rank and status");
        let rank: usize = rank.parse().expect("the local rank");
        let node = (rank + 1) % 2;
        let want: BTreeSet<u32> = cpus(NODE_CPUS[node])
            .intersection(&machine)
            .copied()
            .collect();
        let want = if want.is_empty() {
            machine.clone()
        } else {
            want
        };
        assert_eq!(allowed_in(status), want, "rank {rank}: {stdout}{stderr}");
        let report = format!("multinode bind: rank {rank} (local {rank}) on ");
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&report))
            .unwrap_or_else(|| panic!("no report of rank {rank}: {stderr}"));
        assert!(line.contains(&format!(": GPU {rank} (")), "{line}");
        assert!(line.contains(&format!("NUMA node {node}")), "{line}");
        seen.push(rank);
    }
    seen.sort();
    assert_eq!(seen, [0, 1], "{stdout}{stderr}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let f = Fixture::new();
    let (path, sysfs) = (f.path(), f.sysfs());
    let base = [
        ("PATH", path.as_str()),
        ("MULTINODE_SYSFS_ROOT", sysfs.as_str()),
    ];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(more);
        v
    };
    let line = run_usage_error(&["bind", "--bind", "numaa", "--", "true"], &base);
    assert_eq!(
        line,
        "invalid value 'numaa' for '--bind <MODE>': unknown binding mode 'numaa': give auto, numa, cores or none (see multinode bind --help)"
    );
    let line = run_usage_error(
        &["bind", "--", "true"],
        &with(&[("MULTINODE_BIND", "socket")]),
    );
    assert_eq!(
        line,
        "MULTINODE_BIND='socket' is not a binding mode (auto, numa, cores or none); fix it or unset it"
    );
    let line = run_usage_error(&["bind", "--", "true"], &with(&[("LOCAL_RANK", "first")]));
    assert_eq!(
        line,
        "LOCAL_RANK='first' is not a local rank (0, 1, ...); fix it or unset it"
    );
    let line = run_usage_error(&["bind", "--bind", "numa", "--", "true"], &base);
    assert!(
        line.starts_with("--bind numa needs this process's local rank"),
        "{line}"
    );
    let line = run_usage_error(
        &["bind", "--bind", "numa", "--", "true"],
        &with(&[("SLURM_LOCALID", "0"), ("SLURM_STEP_TASKS_PER_NODE", "9")]),
    );
    assert_eq!(
        line,
        format!(
            "{h}: 9 processes for 8 GPUs: --bind numa binds one process a GPU; start at most 8 on {h}, or use --bind none",
            h = crate::runner::hostname()
        )
    );
    let line = run_usage_error(&["bind", "--bind", "numa"], &base);
    assert!(
        line.contains("required arguments were not provided"),
        "{line}"
    );
    // A program that is not there: 127, as a shell says.
    let out = bind(&f, &["--bind", "none", "--", "no-such-program-here"], &[]);
    assert_eq!(out.code, 127, "{out:?}");
    assert!(
        out.stderr
            .starts_with("multinode: error: cannot run no-such-program-here: "),
        "{out:?}"
    );
}

/// docs/binding.md's one-machine example, as written, on a sysfs of one
/// NUMA node (this machine's, whatever the machine the tests run on), with
/// `on vm:` this machine's name.
#[test]
fn the_binding_pages_example_runs_as_written() {
    let (commands, want) =
        crate::docs::console(&crate::docs::doc_block("docs/binding.md", "bind-one-node"));
    let dir = tempfile::tempdir().expect("tempdir");
    let node = dir.path().join("devices/system/node");
    std::fs::create_dir_all(node.join("node0")).expect("mkdir");
    std::fs::write(node.join("has_cpu"), "0\n").expect("write");
    std::fs::write(node.join("node0/cpulist"), "0-1\n").expect("write");
    let bin = Path::new(BIN).parent().expect("the binary's folder");
    let out = Command::new("bash")
        .args(["-c", &commands])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("MULTINODE_SYSFS_ROOT", dir.path())
        .output()
        .expect("bash");
    let host = crate::runner::hostname();
    let want: Vec<String> = want
        .iter()
        .map(|l| l.replace(" on vm:", &format!(" on {host}:")))
        .collect();
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(String::from)
        .collect();
    got.extend(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from),
    );
    assert!(out.status.success(), "{got:?}");
    assert_eq!(got, want);
}

/// `mn-exec-all --nproc-per-node 2 --bind numa --report-bindings` on two
/// nodes (this machine and an agent, the fixture's GPUs on both): each
/// process runs its script already bound to its GPU's NUMA node (local
/// rank 0 -> GPU 0 on node 1, local rank 1 -> GPU 1 on node 0: GPU order is
/// not NUMA order), within this machine's CPUs; every process prints its
/// binding line, and `--report` keeps it in the process's record.
#[test]
fn exec_all_binds_each_of_its_processes_before_the_script_starts() {
    let f = Fixture::new();
    let cluster = crate::util::Cluster::start(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let out = cluster
        .command(&crate::util::mn_exec_all())
        .env("PATH", f.path())
        .env("MULTINODE_SYSFS_ROOT", f.sysfs())
        .args([
            "--nproc-per-node",
            "2",
            "--bind",
            "numa",
            "--report-bindings",
        ])
        .args(["--report", report.to_str().expect("utf-8")])
        .args([
            "-c",
            "echo \"$RANK $LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mn-exec-all");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{stderr}");
    let own = this_machines_cpus();
    let mut seen = 0;
    for line in stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let local: usize = words[1].parse().expect("LOCAL_RANK");
        let node = (local + 1) % 2;
        let want: BTreeSet<u32> = cpus(NODE_CPUS[node]).intersection(&own).copied().collect();
        let want = if want.is_empty() { own.clone() } else { want };
        assert_eq!(cpus(words[2]), want, "{line}");
        seen += 1;
    }
    assert_eq!(seen, 4, "{stdout}");
    let bound = stderr
        .lines()
        .filter(|l| l.starts_with("multinode bind: rank "))
        .count();
    assert_eq!(bound, 4, "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    for record in json["nodes"].as_array().expect("nodes") {
        let local = record["process"]["local_rank"]
            .as_u64()
            .expect("local rank");
        let binding = record["binding"]
            .as_str()
            .unwrap_or_else(|| panic!("{record}"));
        let want = format!("(local {local}) on ");
        assert!(binding.contains(&want), "{binding}");
        assert!(
            binding.contains(&format!("GPU {local} ("))
                && binding.contains(&format!("NUMA node {}", (local + 1) % 2)),
            "{binding}"
        );
    }
}
