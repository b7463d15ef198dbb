//! Topology sources, contradictions, bad input, which node this is and the
//! head's address, through `multinode hosts` and `multinode env`.

use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;

use crate::runner::{env_json, hostname, hosts, pairs, run, run_ok, run_usage_error};

/// Environment variables for one case.
type Vars<'a> = &'a [(&'a str, &'a str)];

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    fs::write(&path, text).expect("write fixture");
    path.to_str().expect("UTF-8 path").to_string()
}

#[test]
fn hosts_flag_and_hostfile_flag() {
    assert_eq!(
        hosts(&["--hosts", "gpu[01-02]:4,cpu1,[fd00::2]:2"], &[]),
        pairs(&[("gpu01", 4), ("gpu02", 4), ("cpu1", 1), ("fd00::2", 2)])
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let openmpi = write(
        &dir,
        "openmpi",
        "# cluster\nn1 slots=4 max_slots=8\n\nn2 slots=2\n",
    );
    let mpich = write(&dir, "mpich", "n1:3\nn2:1\n");
    let plain = write(&dir, "plain", "n2\nn1\nn2\n");
    assert_eq!(
        hosts(&["--hostfile", &openmpi], &[]),
        pairs(&[("n1", 4), ("n2", 2)])
    );
    assert_eq!(
        hosts(&["--hostfile", &mpich], &[]),
        pairs(&[("n1", 3), ("n2", 1)])
    );
    assert_eq!(
        hosts(&["--hostfile", &plain], &[]),
        pairs(&[("n2", 2), ("n1", 1)])
    );
}

#[test]
fn environment_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pbs = write(&dir, "pbs", "p1\np1\np2\np2\n");
    let lsf = write(&dir, "lsf", "l1\nl1\nl1\nl2\n");
    let cases: &[(Vars, &[(&str, u64)])] = &[
        (
            &[("MULTINODE_HOSTLIST", "m[1-2]:2,x")],
            &[("m1", 2), ("m2", 2), ("x", 1)],
        ),
        (
            &[("MULTINODE_HOSTLIST_NOSLOTS", "m1,m2")],
            &[("m1", 1), ("m2", 1)],
        ),
        (
            &[
                ("SLURM_JOB_NODELIST", "gpu[01-03,07]"),
                ("SLURM_TASKS_PER_NODE", "2(x3),1"),
            ],
            &[("gpu01", 2), ("gpu02", 2), ("gpu03", 2), ("gpu07", 1)],
        ),
        (&[("SLURM_NODELIST", "s[1-2]")], &[("s1", 1), ("s2", 1)]),
        (&[("PBS_NODEFILE", &pbs)], &[("p1", 2), ("p2", 2)]),
        (&[("LSB_DJOB_HOSTFILE", &lsf)], &[("l1", 3), ("l2", 1)]),
        (&[("LSB_MCPU_HOSTS", "l1 4 l2 2")], &[("l1", 4), ("l2", 2)]),
    ];
    for (vars, expected) in cases {
        assert_eq!(hosts(&[], vars), pairs(expected), "{vars:?}");
    }
}

#[test]
fn sources_are_taken_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hostfile = write(&dir, "hf", "f1\n");
    let all = [
        ("MULTINODE_HOSTLIST", "m1"),
        ("SLURM_JOB_NODELIST", "s1"),
        ("SLURM_NODELIST", "s2"),
        ("PBS_NODEFILE", hostfile.as_str()),
        ("LSB_MCPU_HOSTS", "l1 1"),
    ];
    let first = |vars: &[(&str, &str)], args: &[&str]| hosts(args, vars)[0].0.clone();
    assert_eq!(first(&all, &["--hosts", "h1"]), "h1");
    assert_eq!(first(&all, &["--hostfile", &hostfile]), "f1");
    assert_eq!(first(&all, &[]), "m1");
    assert_eq!(first(&all[1..], &[]), "s1");
    assert_eq!(first(&all[2..], &[]), "s2");
    assert_eq!(first(&all[3..], &[]), "f1");
    assert_eq!(first(&all[4..], &[]), "l1");
}

/// A `nvidia-smi` that prints `out` and exits with `code`, alone on a PATH.
fn fake_nvidia_smi(dir: &tempfile::TempDir, out: &str, code: i32) -> String {
    let bin = dir.path().join("bin");
    fs::create_dir_all(&bin).expect("mkdir");
    let script = bin.join("nvidia-smi");
    fs::write(
        &script,
        format!("#!/bin/sh\nprintf '%s' '{out}'\nexit {code}\n"),
    )
    .expect("write");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    bin.to_str().expect("UTF-8").to_string()
}

/// The warning with which a command that found no hostlist makes a one-node job.
const NO_HOSTLIST: &str = "multinode: warning: no hostlist is set (no --hosts, --hostfile, \
MULTINODE_HOSTLIST, SLURM_JOB_NODELIST, PBS_NODEFILE, LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS or \
Kubernetes job variables): this is a one-node job on this machine; for several nodes set \
MULTINODE_HOSTLIST=host1:SLOTS,host2:SLOTS (to silence this, MULTINODE_HOSTLIST=$(hostname):1)\n";

/// `multinode hosts` with no hostlist: this machine, and the warning (only it) on stderr.
fn one_machine_hosts(args: &[&str], vars: &[(&str, &str)]) -> Vec<(String, u64)> {
    let mut full = vec!["hosts", "--no-resolve", "--format", "json"];
    full.extend_from_slice(args);
    let out = run(&full, vars);
    assert_eq!((out.code, out.stderr.as_str()), (0, NO_HOSTLIST), "{out:?}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("JSON");
    rows.iter()
        .map(|row| {
            (
                row["host"].as_str().expect("host").to_string(),
                row["slots"].as_u64().expect("slots"),
            )
        })
        .collect()
}

/// `multinode env` with no hostlist warns (one line naming the variables to
/// set) and goes on with a one-node job; with a hostlist, or a flag, it says nothing.
#[test]
fn no_hostlist_is_a_warning_that_names_the_variables() {
    let out = run(&["env"], &[]);
    assert_eq!((out.code, out.stderr.as_str()), (0, NO_HOSTLIST), "{out:?}");
    assert!(
        out.stdout.contains("export MULTINODE_NNODES='1'\n"),
        "{out:?}"
    );
    let me = hostname();
    let mine = format!("{me}:1");
    for (args, vars) in [
        (vec!["env"], vec![("MULTINODE_HOSTLIST", mine.as_str())]),
        (vec!["env", "--hosts", mine.as_str()], vec![]),
    ] {
        let out = run(&args, &vars);
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?} {vars:?}: {out:?}"
        );
    }
}

#[test]
fn one_machine_default_counts_gpus() {
    let me = hostname();
    let hosts = one_machine_hosts;
    assert_eq!(hosts(&[], &[]), pairs(&[(&me, 1)]));
    assert_eq!(
        hosts(&[], &[("CUDA_VISIBLE_DEVICES", "0,1,2")]),
        pairs(&[(&me, 3)])
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let three = "GPU 0: H200 (UUID: a)\nGPU 1: H200 (UUID: b)\n  MIG 1g.18gb Device 0: (UUID: c)\nGPU 2: H200 (UUID: d)\n";
    let path = fake_nvidia_smi(&dir, three, 0);
    assert_eq!(hosts(&[], &[("PATH", &path)]), pairs(&[(&me, 3)]));
    // CUDA_VISIBLE_DEVICES is what the job's processes see: it wins.
    assert_eq!(
        hosts(&[], &[("PATH", &path), ("CUDA_VISIBLE_DEVICES", "0")]),
        pairs(&[(&me, 1)])
    );
    let broken = tempfile::tempdir().expect("tempdir");
    let path = fake_nvidia_smi(&broken, "NVIDIA-SMI has failed", 9);
    assert_eq!(
        hosts(&[], &[("PATH", &path), ("CUDA_VISIBLE_DEVICES", "0,1")]),
        pairs(&[(&me, 2)])
    );
}

#[test]
fn contradictions_are_errors() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("MULTINODE_HOSTLIST", "a:2,b:2"),
                ("MULTINODE_HOSTLIST_NOSLOTS", "a,c"),
            ],
            "MULTINODE_HOSTLIST names 'a,b' but MULTINODE_HOSTLIST_NOSLOTS names 'a,c'; set one of them, or make them agree",
        ),
        (
            &[
                ("MULTINODE_HOSTLIST", "a:2,b:2"),
                ("MULTINODE_TOTAL_SLOTS", "5"),
            ],
            "MULTINODE_TOTAL_SLOTS=5 but the hostlist from MULTINODE_HOSTLIST gives 4 slot(s); fix or unset MULTINODE_TOTAL_SLOTS, or fix the hostlist",
        ),
        (
            &[("SLURM_JOB_NODELIST", "a,b"), ("MULTINODE_NNODES", "3")],
            "MULTINODE_NNODES=3 but the hostlist from SLURM_JOB_NODELIST gives 2 node(s); fix or unset MULTINODE_NNODES, or fix the hostlist",
        ),
        (
            &[("SLURM_JOB_NODELIST", "a,b"), ("MULTINODE_HEAD", "b")],
            "MULTINODE_HEAD=b but the hostlist from SLURM_JOB_NODELIST gives head 'a'; fix or unset MULTINODE_HEAD, or fix the hostlist",
        ),
        (
            &[
                ("SLURM_JOB_NODELIST", "s[1-4]"),
                ("SLURM_TASKS_PER_NODE", "2(x3)"),
            ],
            "SLURM_TASKS_PER_NODE='2(x3)' describes 3 nodes but SLURM_JOB_NODELIST has 4; they must agree",
        ),
        (
            &[
                ("MULTINODE_HOSTLIST", "10.0.0.1,10.0.0.2"),
                ("MULTINODE_NODE_RANK", "1"),
                ("RANK", "0"),
            ],
            "MULTINODE_NODE_RANK=1 but RANK=0; they must agree: unset one of them",
        ),
    ];
    for (vars, message) in cases {
        assert_eq!(run_usage_error(&["env"], vars), *message, "{vars:?}");
    }
    // Consistent values are fine.
    let vars = [
        ("MULTINODE_HOSTLIST", "a:2,b:2"),
        ("MULTINODE_HOSTLIST_NOSLOTS", "a,b"),
        ("MULTINODE_TOTAL_SLOTS", "4"),
        ("MULTINODE_NNODES", "2"),
        ("MULTINODE_HEAD", "a"),
    ];
    assert_eq!(hosts(&[], &vars), pairs(&[("a", 2), ("b", 2)]));
    assert_eq!(
        run_usage_error(
            &["env", "--hosts", "10.0.0.1", "--node-rank", "0"],
            &[("RANK", "1")]
        ),
        "--node-rank=0 but RANK=1; they must agree: unset one of them"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad_slots = write(&dir, "bad", "a slots=2\nb slots=0\n");
    let dup = write(&dir, "dup", "a:2\nb\na:1\n");
    let empty = write(&dir, "empty", "# nobody\n");
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("UTF-8");
    let cases: &[(&[&str], Vars, &str)] = &[
        (
            &["--hosts", "gpu[9-3]"],
            &[],
            "--hosts: reversed range '9-3' in 'gpu[9-3]'",
        ),
        (
            &["--hosts", "gpu[1-2"],
            &[],
            "--hosts: unmatched '[' at character 4 of 'gpu[1-2'",
        ),
        (
            &["--hosts", "a,,b"],
            &[],
            "--hosts: empty host name at character 3 of 'a,,b'",
        ),
        (
            &["--hosts", "gpu[a-b]"],
            &[],
            "--hosts: 'a-b' in 'gpu[a-b]' is not a number or a range such as 1-4",
        ),
        (
            &["--hosts", "gpu[1-2000000]"],
            &[],
            "--hosts: 'gpu[1-2000000]' expands to more than 1000000 hosts",
        ),
        (
            &["--hosts", "gpu[01-03],gpu02"],
            &[],
            "--hosts: duplicate host 'gpu02' at positions 2 and 4 in 'gpu[01-03],gpu02'",
        ),
        (
            &["--hosts", "a;reboot"],
            &[],
            "--hosts: host name 'a;reboot' contains ';'; host names hold only letters, digits, '.', '-' and '_'",
        ),
        (
            &["--hosts", "a b"],
            &[],
            "--hosts: host name 'a b' contains whitespace; host names hold only letters, digits, '.', '-' and '_'",
        ),
        (
            &["--hosts", "$(id)"],
            &[],
            "--hosts: host name '$(id)' contains '$'; host names hold only letters, digits, '.', '-' and '_'",
        ),
        (
            &["--hosts=-oProxyCommand=x"],
            &[],
            "--hosts: host name '-oProxyCommand=x' contains '='; host names hold only letters, digits, '.', '-' and '_'",
        ),
        (
            &["--hosts=-x,y"],
            &[],
            "--hosts: host name '-x' starts with '-'; host names start with a letter or a digit",
        ),
        (
            &["--hosts", "a:0"],
            &[],
            "--hosts: slot count '0' for 'a' is not a positive integer",
        ),
        (
            &["--hosts", "a:-2"],
            &[],
            "--hosts: slot count '-2' for 'a' is not a positive integer",
        ),
        (
            &["--hosts", "a:two"],
            &[],
            "--hosts: slot count 'two' for 'a' is not a positive integer",
        ),
        (
            &["--hosts", "a:99999999999"],
            &[],
            "--hosts: slot count '99999999999' for 'a' is too large (at most 4294967295)",
        ),
        (
            &["--hosts", "fe80::1:2"],
            &[],
            "--hosts: IPv6 address 'fe80::1:2' must be written in brackets: '[fe80::1:2]', or '[fe80::1:2]:SLOTS' with a slot count",
        ),
        (
            &["--hosts", "a", "--hostfile", "/x"],
            &[],
            "--hosts and --hostfile both given; use one of them",
        ),
        (
            &["--hostfile", &bad_slots],
            &[],
            &format!(
                "--hostfile '{bad_slots}': line 2: slot count '0' for 'b' is not a positive integer"
            ),
        ),
        (
            &["--hostfile", &dup],
            &[],
            &format!("--hostfile '{dup}': duplicate host 'a' on lines 1 and 3"),
        ),
        (
            &["--hostfile", &empty],
            &[],
            &format!("--hostfile '{empty}': no hosts in it"),
        ),
        (
            &["--hostfile", missing],
            &[],
            &format!("cannot read --hostfile '{missing}': No such file or directory (os error 2)"),
        ),
        (
            &[],
            &[("SLURM_JOB_NODELIST", "gpu[9-3]")],
            "SLURM_JOB_NODELIST: reversed range '9-3' in 'gpu[9-3]'",
        ),
        (
            &[],
            &[
                ("SLURM_JOB_NODELIST", "a"),
                ("SLURM_TASKS_PER_NODE", "2(x)"),
            ],
            "SLURM_TASKS_PER_NODE: '2(x)' in '2(x)' is not a task count such as 2 or 2(x3)",
        ),
        (
            &[],
            &[("MULTINODE_HOSTLIST_NOSLOTS", "a:2")],
            "MULTINODE_HOSTLIST_NOSLOTS: 'a:2' has a slot count, but this list holds host names only",
        ),
        (
            &[],
            &[("LSB_MCPU_HOSTS", "a 4 b")],
            "LSB_MCPU_HOSTS: host 'b' has no slot count; the form is 'host1 4 host2 4'",
        ),
        (
            &[],
            &[("PBS_NODEFILE", missing)],
            &format!(
                "cannot read PBS_NODEFILE '{missing}': No such file or directory (os error 2)"
            ),
        ),
        (
            &[],
            &[("MULTINODE_TOTAL_SLOTS", "many")],
            "MULTINODE_TOTAL_SLOTS='many' is not a number; fix it or unset it",
        ),
    ];
    for (args, vars, message) in cases {
        let mut full = vec!["hosts", "--no-resolve"];
        full.extend_from_slice(args);
        assert_eq!(run_usage_error(&full, vars), *message, "{args:?} {vars:?}");
    }
}

#[test]
fn which_node_this_is() {
    let me = hostname();
    let two_others = [("MULTINODE_HOSTLIST", "10.9.0.1,10.9.0.2")];
    let rank = |args: &[&str], vars: &[(&str, &str)]| env_json(args, vars)["RANK"].clone();
    // By name: this machine is the second entry.
    let list = format!("head-elsewhere.invalid,{me}");
    assert_eq!(
        rank(
            &[],
            &[
                ("MULTINODE_HOSTLIST", &list),
                ("MULTINODE_NODE_IP", "10.9.0.1")
            ]
        ),
        "1"
    );
    // Explicit ranks.
    assert_eq!(rank(&["--node-rank", "1"], &two_others), "1");
    let with = |extra: (&'static str, &'static str)| [two_others[0], extra];
    assert_eq!(rank(&[], &with(("MULTINODE_NODE_RANK", "1"))), "1");
    assert_eq!(rank(&[], &with(("RANK", "1"))), "1");
    assert_eq!(
        run_usage_error(&["env"], &with(("RANK", "2"))),
        "RANK=2 but the hostlist from MULTINODE_HOSTLIST has 2 node(s), ranks 0 to 1; fix RANK"
    );
    assert_eq!(
        run_usage_error(&["env"], &with(("MULTINODE_NODE_RANK", "one"))),
        "MULTINODE_NODE_RANK='one' is not a node rank (0, 1, 2, ...); fix it or unset it"
    );
    let missing = run_usage_error(&["env"], &two_others);
    assert!(
        missing.starts_with(&format!("this machine ({me}"))
            && missing.contains("addresses 127.0.0.1"),
        "{missing}"
    );
    assert!(
        missing.ends_with("is not in the hostlist from MULTINODE_HOSTLIST; set MULTINODE_NODE_RANK (or --node-rank) to this node's rank"),
        "{missing}"
    );
    // An IP literal equal to an interface address is this machine.
    assert_eq!(rank(&["--hosts", "10.9.0.1,127.0.0.1"], &[]), "1");
    let several = run_usage_error(&["env", "--hosts", &format!("{me},127.0.0.1")], &[]);
    assert_eq!(
        several,
        format!(
            "this machine matches several hosts of the hostlist from --hosts: {me} (rank 0), 127.0.0.1 (rank 1); set MULTINODE_NODE_RANK (or --node-rank) to this node's rank"
        )
    );
}

#[test]
fn head_address() {
    let me = hostname();
    // The head's entry is an IP literal: taken as written, loopback included.
    let demo = env_json(
        &["--hosts", "127.0.0.2:1,127.0.0.3:1"],
        &[("MULTINODE_NODE_RANK", "1")],
    );
    assert_eq!(demo["MULTINODE_NODE_IP"], "127.0.0.2");
    assert_eq!(demo["MULTINODE_LOCAL_IP"], "127.0.0.3");
    assert_eq!(demo["MULTINODE_HEAD"], "127.0.0.2");
    // This machine is the head, by name: its interface's address, never loopback.
    let head = env_json(&["--hosts", &format!("{me},worker.invalid")], &[]);
    let ip: IpAddr = head["MULTINODE_NODE_IP"].parse().expect("an IP address");
    assert!(!ip.is_loopback(), "{ip}");
    assert_eq!(head["MULTINODE_LOCAL_IP"], head["MULTINODE_NODE_IP"]);
    // An interface that does not exist.
    let e = run_usage_error(
        &["env", "--hosts", &format!("{me},w"), "--iface", "nosuch0"],
        &[],
    );
    assert!(
        e.starts_with("no interface matches --iface='nosuch0' (this machine has: lo"),
        "{e}"
    );
    let e = run_usage_error(
        &["env", "--hosts", &format!("{me},w")],
        &[("NCCL_SOCKET_IFNAME", "=lo")],
    );
    assert!(
        e.starts_with("interfaces matching NCCL_SOCKET_IFNAME='=lo' have no usable address"),
        "{e}"
    );
    // Honoured from the environment, and validated.
    let vars = [
        ("MULTINODE_HOSTLIST", "h.invalid,127.0.0.7"),
        ("MULTINODE_NODE_RANK", "1"),
    ];
    let set = [vars[0], vars[1], ("MULTINODE_NODE_IP", "10.1.2.3")];
    assert_eq!(env_json(&[], &set)["MULTINODE_NODE_IP"], "10.1.2.3");
    let bad = [vars[0], vars[1], ("MULTINODE_NODE_IP", "h.invalid")];
    assert_eq!(
        run_usage_error(&["env"], &bad),
        "MULTINODE_NODE_IP='h.invalid' is not an IP address; fix it or unset it"
    );
    // The head is another machine whose name resolves only to loopback.
    let e = run_usage_error(
        &["env", "--hosts", "localhost,127.0.0.7", "--node-rank", "1"],
        &[],
    );
    assert!(
        e.starts_with("head host 'localhost' resolves only to loopback (127.0.0.1"),
        "{e}"
    );
    assert!(
        e.contains("/etc/hosts") && e.contains("set MULTINODE_NODE_IP"),
        "{e}"
    );
    let e = run_usage_error(
        &["env", "--hosts", "h.invalid,127.0.0.7", "--node-rank", "1"],
        &[],
    );
    assert!(
        e.starts_with("cannot resolve head host 'h.invalid': "),
        "{e}"
    );
    assert!(
        e.ends_with("; set MULTINODE_NODE_IP to the head's address"),
        "{e}"
    );
}

#[test]
fn hosts_table_and_json() {
    let table = run_ok(
        &[
            "hosts",
            "--hosts",
            "127.0.0.2:4,127.0.0.3:12",
            "--node-rank",
            "1",
        ],
        &[],
    );
    assert_eq!(
        table,
        "\
RANK  HOST       SLOTS  ADDRESS
0     127.0.0.2  4      127.0.0.2
1     127.0.0.3  12     127.0.0.3
"
    );
    let json = run_ok(
        &["hosts", "--hosts", "127.0.0.2,[::1]:2", "--format", "json"],
        &[],
    );
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(
        value,
        serde_json::json!([
            {"rank": 0, "host": "127.0.0.2", "slots": 1, "address": "127.0.0.2"},
            {"rank": 1, "host": "::1", "slots": 2, "address": "::1"},
        ])
    );
    let plain = run_ok(&["hosts", "--no-resolve", "--hosts", "gpu[01-02]"], &[]);
    assert_eq!(
        plain,
        "RANK  HOST   SLOTS  ADDRESS\n0     gpu01  1      -\n1     gpu02  1      -\n"
    );
}

/// The Kubernetes shapes through the binary (the Indexed Job's pod names
/// need a pod's host name and FQDN: the Docker cluster's `k8s-*` scenarios
/// run it with the names Kubernetes gives).
#[test]
fn kubernetes_shapes() {
    let pytorch: Vars = &[
        ("PET_NNODES", "3"),
        ("PET_NODE_RANK", "1"),
        ("PET_NPROC_PER_NODE", "2"),
        ("MASTER_ADDR", "bert-master-0"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "6"),
        ("RANK", "1"),
    ];
    assert_eq!(
        hosts(&[], pytorch),
        pairs(&[
            ("bert-master-0", 2),
            ("bert-worker-0", 2),
            ("bert-worker-1", 2)
        ])
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let hostfile = write(
        &dir,
        "hostfile",
        "mpi-launcher.mpi.default.svc slots=4\nmpi-worker-0.mpi.default.svc slots=4\n",
    );
    assert_eq!(
        hosts(&[], &[("MULTINODE_MPI_HOSTFILE", &hostfile)]),
        pairs(&[
            ("mpi-launcher.mpi.default.svc", 4),
            ("mpi-worker-0.mpi.default.svc", 4)
        ])
    );
    // Earlier sources win: Slurm's variables in a pod are Slurm's job.
    let mut both = pytorch.to_vec();
    both.push(("SLURM_JOB_NODELIST", "s[1-2]"));
    assert_eq!(hosts(&[], &both), pairs(&[("s1", 1), ("s2", 1)]));

    let me = hostname();
    let index = if me.ends_with("-7") { "8" } else { "7" };
    let not_indexed = format!(
        "JOB_COMPLETION_INDEX={index} but this pod's host name '{me}' does not end in '-{index}' as an Indexed Job's pods do (<job>-<index>); set MULTINODE_HOSTLIST"
    );
    let cases: &[(Vars, &str)] = &[
        (
            &[("JOB_COMPLETION_INDEX", index), ("MULTINODE_NNODES", "9")],
            &not_indexed,
        ),
        (
            &[("JOB_COMPLETION_INDEX", "1")],
            "JOB_COMPLETION_INDEX=1 (a Kubernetes Indexed Job) but the node count is unknown; set MULTINODE_NNODES to the Job's completions",
        ),
        (
            &[
                ("JOB_COMPLETION_INDEX", "1"),
                ("MULTINODE_NNODES", "4"),
                ("PET_NNODES", "2"),
            ],
            "MULTINODE_NNODES=4 but PET_NNODES=2; they must agree: unset one of them",
        ),
        (
            &[("PET_NNODES", "1:4"), ("MASTER_ADDR", "bert-master-0")],
            "PET_NNODES='1:4' is an elastic range; multinode needs a fixed node count: set PET_NNODES=N or MULTINODE_HOSTLIST",
        ),
        (
            &[
                ("PET_NNODES", "2"),
                ("MASTER_ADDR", "bert-master-0"),
                ("RANK", "1"),
                ("PET_NODE_RANK", "0"),
            ],
            "PET_NODE_RANK=0 but RANK=1; they must agree: unset one of them",
        ),
        (
            &[("MULTINODE_MPI_HOSTFILE", "/nonexistent/hostfile")],
            "cannot read MULTINODE_MPI_HOSTFILE '/nonexistent/hostfile': No such file or directory (os error 2)",
        ),
    ];
    for (vars, message) in cases {
        assert_eq!(run_usage_error(&["env"], vars), *message, "{vars:?}");
    }
}
