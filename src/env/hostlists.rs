//! `MULTINODE_HOSTLIST` and `_NOSLOTS` at any size.
//!
//! Linux refuses to `exec` with one environment string longer than 128 KiB
//! (`MAX_ARG_STRLEN`): a hostlist written out in full passes that near 7,700
//! nodes named like `gpu-node-00001:8`, and every command of the job would
//! then fail with E2BIG. The two lists are two strings, so each is judged on
//! its own:
//!
//! - a list of at most [`FULL_LIMIT`] bytes is written out in full
//!   (`gpu01:8,gpu02:8`, as `mpirun -H` wants it; `gpu01,gpu02`, whose
//!   commas count the nodes);
//! - a longer one is folded (`gpu[01-99]:8`, which every `multinode`
//!   command reads as the same list); when `MULTINODE_HOSTLIST` is,
//!   [`HOSTFILE_VAR`] names a file that holds every node on its own line,
//!   `host slots=N` (Open MPI's hostfile form, which `--hostfile` reads too).
//!   `MULTINODE_HOSTLIST_NOSLOTS`, shorter by the slots, stays written out
//!   longer (to ~8,700 such nodes); when it is folded too,
//!   [`Lists::folded_note`] says to count the nodes with `MULTINODE_NNODES`.
//!
//! A node reached through an external wrapper gets its variables in one
//! command line, which its sshd runs as one `sh -c` argument: there both
//! lists together must fit ([`ONE_LINE_LIMIT`]), and `MULTINODE_HOSTLIST`
//! is folded first.
//!
//! Between exec_all and an agent the lists always travel folded, in one
//! variable ([`FOLDED_VAR`]), which the agent turns back into the above on
//! its node ([`WireCache::expand_wire`]): the bytes sent to a node do not
//! grow with the node count when the names are regular.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use crate::topology::Topology;

/// Linux's limit on one argument or environment string, its NUL included
/// (`MAX_ARG_STRLEN`, 32 pages of 4 KiB): `exec` fails with E2BIG past it.
const MAX_ARG_STRLEN: usize = 131_072;
/// The longest list written out in full, in bytes: `NAME=VALUE` must fit in
/// [`MAX_ARG_STRLEN`], and 1 KiB is left for the name (27 bytes at most,
/// `MULTINODE_HOSTLIST_NOSLOTS=`) and the NUL.
pub const FULL_LIMIT: usize = MAX_ARG_STRLEN - 1024;
/// Both lists written out in one command line (an external wrapper's
/// `export ...; SCRIPT`, one argument of `sh -c` on the node), together at
/// most this: 8 KiB are left for the rest of the line.
pub const ONE_LINE_LIMIT: usize = MAX_ARG_STRLEN - 8 * 1024;
/// Names the file of every node when the lists are folded.
pub const HOSTFILE_VAR: &str = "MULTINODE_HOSTFILE";
/// exec_all → agent only: the folded `MULTINODE_HOSTLIST`, from which the
/// agent writes both lists for the command.
pub const FOLDED_VAR: &str = "MULTINODE_HOSTLIST_FOLDED";
/// The list whose commas count the nodes, while it is written out.
pub const NOSLOTS_VAR: &str = "MULTINODE_HOSTLIST_NOSLOTS";

/// The lists as a node's commands see them, rendered once for a job.
#[derive(Debug, Clone)]
pub(crate) struct Lists {
    /// The folded `MULTINODE_HOSTLIST`, for the wire.
    pub folded: String,
    /// `MULTINODE_HOSTLIST`, `MULTINODE_HOSTLIST_NOSLOTS` and, when the
    /// first is folded, `MULTINODE_HOSTFILE`: rendered when a node first
    /// needs them (exec_all sends agents `folded` alone; a relay's exec_all,
    /// one process of the tree per group, renders them for its own node only).
    written: OnceLock<Written>,
    /// The two lists for one command line ([`ONE_LINE_LIMIT`]), no hostfile.
    one_line: OnceLock<Written>,
}

/// The variables of the lists, and whether `MULTINODE_HOSTLIST_NOSLOTS` is
/// folded among them.
#[derive(Debug, Clone)]
struct Written {
    vars: Vec<(String, String)>,
    noslots_folded: bool,
    /// Why the hostfile could not be written (its variable is left out).
    hostfile_warning: Option<String>,
}

/// Where the lists go: each into a variable of its own (a process's
/// environment), or both into one command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    EachVariable,
    OneLine,
}

impl Lists {
    /// The lists of `topo`, folded; the rest comes with [`Lists::vars`].
    pub fn new(topo: &Topology) -> Self {
        Lists {
            folded: topo.hostlist_folded(),
            written: OnceLock::new(),
            one_line: OnceLock::new(),
        }
    }

    /// The variables of `topo` (the topology given to [`Lists::new`]) for a
    /// node's environment; with `MULTINODE_HOSTLIST` past [`FULL_LIMIT`],
    /// writes the hostfile in the system's temporary directory, where it
    /// outlives this process (`multinode env` is gone before the job reads
    /// it); a file that cannot be written is a warning, and the variable is
    /// left out.
    pub fn vars(&self, topo: &Topology) -> &[(String, String)] {
        &self.rendered(topo).vars
    }

    fn rendered(&self, topo: &Topology) -> &Written {
        self.written.get_or_init(|| {
            let temp = std::env::temp_dir();
            let rendered = written(topo, &self.folded, Room::EachVariable, Ok(&temp));
            if let Some(warning) = &rendered.hostfile_warning {
                tracing::warn!("{warning}");
            }
            rendered
        })
    }

    /// The two lists of `topo` for a node that gets them in one command
    /// line (an external wrapper): together within [`ONE_LINE_LIMIT`].
    pub fn one_line_vars(&self, topo: &Topology) -> &[(String, String)] {
        &self
            .one_line
            .get_or_init(|| written(topo, &self.folded, Room::OneLine, Err("one command line")))
            .vars
    }

    /// When [`Lists::vars`] folds `MULTINODE_HOSTLIST_NOSLOTS`: what to
    /// tell the user, whose script may count the nodes by its commas.
    pub fn folded_note(&self, topo: &Topology) -> Option<String> {
        self.rendered(topo).noslots_folded.then(|| {
            let nodes = topo.nodes.len();
            format!(
                "{NOSLOTS_VAR} is folded ({}): written out, the names of the {nodes} nodes \
                 would pass Linux's limit of 128 KiB for one variable; count the nodes with \
                 MULTINODE_NNODES ({nodes}), not with the commas of the list",
                crate::topology::shorten(&topo.hostlist_noslots_folded())
            )
        })
    }
}

/// The lists of `topo` for `room`; with `MULTINODE_HOSTLIST` folded in a
/// process's environment, a hostfile written in `dir` (or why there is no
/// `dir`), and a warning when it could not be (the variable is then left out).
fn written(topo: &Topology, folded: &str, room: Room, dir: Result<&Path, &str>) -> Written {
    let full = topo.hostlist();
    let noslots = topo.hostlist_noslots();
    let (full_fits, noslots_fits) = match room {
        Room::EachVariable => (full.len() <= FULL_LIMIT, noslots.len() <= FULL_LIMIT),
        Room::OneLine => (
            full.len() + noslots.len() <= ONE_LINE_LIMIT,
            noslots.len() <= ONE_LINE_LIMIT,
        ),
    };
    let mut vars = Vec::with_capacity(3);
    vars.push((
        "MULTINODE_HOSTLIST".to_string(),
        if full_fits { full } else { folded.to_string() },
    ));
    vars.push((
        NOSLOTS_VAR.to_string(),
        if noslots_fits {
            noslots
        } else {
            topo.hostlist_noslots_folded()
        },
    ));
    // The file is for this node's commands: a command line to another node
    // cannot name a file of this one.
    let mut hostfile_warning = None;
    if !full_fits && room == Room::EachVariable {
        let file = match dir {
            Ok(dir) => write_hostfile(topo, dir).map_err(|e| format!("in {}: {e}", dir.display())),
            Err(why) => Err(format!("(no directory for it: {why})")),
        };
        match file {
            Ok(path) => vars.push((
                HOSTFILE_VAR.to_string(),
                path.to_string_lossy().into_owned(),
            )),
            Err(e) => {
                hostfile_warning = Some(format!(
                    "cannot write the hostfile of {} nodes {e}; {HOSTFILE_VAR} is not set",
                    topo.nodes.len(),
                ));
            }
        }
    }
    Written {
        vars,
        noslots_folded: !noslots_fits,
        hostfile_warning,
    }
}

/// Every variable name this module may set, the wire's included.
pub(crate) const NAMES: [&str; 4] = ["MULTINODE_HOSTLIST", NOSLOTS_VAR, HOSTFILE_VAR, FOLDED_VAR];

/// [`WireCache::expand_wire`] without a cache, writing in the system's
/// temporary directory.
#[cfg(test)]
pub(crate) fn expand_wire(env: &mut Vec<(String, String)>) -> Result<(), String> {
    WireCache::new(Ok(std::env::temp_dir())).expand_wire(env)
}

/// Where this user's private files of a run go: `$XDG_RUNTIME_DIR` when it
/// is set, a directory of this user's, and not one where other users could
/// move an entry away and put their own in its place (writable by them and
/// not sticky, as the head agent's socket's directory is checked); else
/// the system's temporary directory (files there get unpredictable names
/// and mode 0600, and it is sticky).
pub(crate) fn runtime_base(env: &crate::env_map::EnvMap) -> PathBuf {
    let Some(dir) = env.get("XDG_RUNTIME_DIR").map(PathBuf::from) else {
        return std::env::temp_dir();
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() => {
            match crate::private_files::others_can_replace(&m) {
                None => dir,
                Some(why) => {
                    let instead = std::env::temp_dir();
                    tracing::warn!(
                        "not using XDG_RUNTIME_DIR {}: it {why}, who could replace what is put there; \
                         using {} (make it mode 0700)",
                        dir.display(),
                        instead.display()
                    );
                    instead
                }
            }
        }
        _ => std::env::temp_dir(),
    }
}

/// Makes an agent's own directory for its hostfiles: mode 0700, under an
/// unpredictable name, in [`runtime_base`]. The agent removes it, and all
/// that is in it, when it ends (its group keeper, if it is killed).
pub(crate) fn private_dir(env: &crate::env_map::EnvMap) -> Result<PathBuf, String> {
    let base = runtime_base(env);
    let dir = tempfile::Builder::new()
        .prefix("multinode-agent-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&base)
        .map_err(|e| match std::fs::metadata(&base) {
            // Said of the place itself rather than of the random name tried.
            Err(why) => format!("{}: {why}", base.display()),
            Ok(_) => e.to_string(),
        })?;
    Ok(dir.keep())
}

/// An agent's last expansion of [`FOLDED_VAR`]: every command of a job
/// sends the same folded list, and expanding it (parsing, writing out both
/// lists) was ~5% of an agent's CPU a command at 100 nodes.
#[derive(Debug)]
pub(crate) struct WireCache {
    /// The folded list, and its variables written out.
    last: std::sync::Mutex<Option<(String, Vars)>>,
    /// Where hostfiles are written ([`private_dir`]), or why there is no such place.
    dir: Result<PathBuf, String>,
}

/// Variables, shared between the commands that get them.
type Vars = Arc<[(String, String)]>;

impl WireCache {
    /// `dir`: where to write hostfiles, or why there is no such place (a
    /// command that needs one is told so).
    pub(crate) fn new(dir: Result<PathBuf, String>) -> Self {
        WireCache {
            last: std::sync::Mutex::new(None),
            dir,
        }
    }

    /// The directory of the hostfiles, if there is one.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref().ok()
    }

    /// Replaces [`FOLDED_VAR`] in a request's variables by the lists as
    /// [`Lists::new`] writes them; returns a message for the command when the
    /// value is not a hostlist (the variable is then dropped) or its hostfile
    /// cannot be written (the lists are set, [`HOSTFILE_VAR`] is not). From
    /// the cache when `env` holds the folded list expanded last (and, past
    /// [`FULL_LIMIT`], its hostfile is still there).
    pub(crate) fn expand_wire(&self, env: &mut Vec<(String, String)>) -> Result<(), String> {
        let Some(at) = env.iter().position(|(k, _)| k == FOLDED_VAR) else {
            return Ok(());
        };
        let (_, folded) = env.remove(at);
        let (vars, warning) = self.vars(folded)?;
        env.retain(|(k, _)| !NAMES.contains(&k.as_str()));
        let at = at.min(env.len());
        env.splice(at..at, vars.iter().cloned());
        warning.map_or(Ok(()), Err)
    }

    /// The variables of `folded`, and a warning when its hostfile could not
    /// be written (such variables are not kept: the next command tries again).
    fn vars(&self, folded: String) -> Result<(Vars, Option<String>), String> {
        let mut last = self
            .last
            .lock()
            .expect("not poisoned: no panics while held");
        if let Some((seen, vars)) = last.as_ref()
            && *seen == folded
            && vars
                .iter()
                .all(|(k, v)| k != HOSTFILE_VAR || Path::new(v).is_file())
        {
            return Ok((vars.clone(), None));
        }
        let topo = Topology::from_hostlist(&folded, FOLDED_VAR)
            .map_err(|e| format!("{FOLDED_VAR}: {e}"))?;
        let lists = Lists::new(&topo);
        let dir = self.dir.as_deref().map_err(String::as_str);
        let rendered = written(&topo, &lists.folded, Room::EachVariable, dir);
        let (vars, warning): (Vars, _) = (rendered.vars.into(), rendered.hostfile_warning);
        if warning.is_none() {
            *last = Some((folded, vars.clone()));
        }
        Ok((vars, warning))
    }
}

/// Writes `host slots=N` lines for every node into `dir`, under a name made
/// of this user's id and a digest of the content, and returns its path. A
/// file of that name already there is used when it is this user's and holds
/// the same text. Otherwise a new file (mode 0600, an unpredictable name,
/// never through a link) takes that name; where it cannot (another user's
/// entry in a shared directory), it keeps its own name: something planted
/// at either name never leaves the job without a hostfile.
fn write_hostfile(topo: &Topology, dir: &Path) -> std::io::Result<PathBuf> {
    let mut text = String::with_capacity(topo.nodes.len() * 24);
    for node in &topo.nodes {
        text.push_str(&node.host);
        text.push_str(" slots=");
        text.push_str(&node.slots.to_string());
        text.push('\n');
    }
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let uid = nix::unistd::geteuid().as_raw();
    let name = format!("multinode-hosts-{uid}-{hex}");
    let path = dir.join(&name);
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.uid() == uid
        && std::fs::read(&path).is_ok_and(|old| old == text.as_bytes())
    {
        return Ok(path);
    }
    let mut file = tempfile::Builder::new()
        .prefix(&format!("{name}."))
        .tempfile_in(dir)?;
    file.write_all(text.as_bytes())?;
    match file.persist(&path) {
        Ok(_) => Ok(path),
        Err(e) => {
            let (_, kept) = e.file.keep().map_err(|e| e.error)?;
            Ok(kept)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Node;

    fn topo(n: usize) -> Topology {
        Topology {
            nodes: (1..=n)
                .map(|i| Node {
                    host: format!("gpu-node-{i:05}"),
                    slots: 8,
                })
                .collect(),
            source: "test".into(),
        }
    }

    fn get<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn each_list_full_up_to_the_limit_then_folded() {
        // 17 bytes a node ("gpu-node-00001:8,"): 7,649 nodes fit in FULL_LIMIT.
        let (small_topo, big_topo) = (topo(7649), topo(7650));
        let small = Lists::new(&small_topo);
        let small_vars = small.vars(&small_topo);
        assert_eq!(
            get(small_vars, "MULTINODE_HOSTLIST").map(str::len),
            Some(7649 * 17 - 1)
        );
        assert_eq!(get(small_vars, HOSTFILE_VAR), None);
        assert_eq!(small.folded, "gpu-node-[00001-07649]:8");
        let big = Lists::new(&big_topo);
        let big_vars = big.vars(&big_topo);
        assert_eq!(
            get(big_vars, "MULTINODE_HOSTLIST"),
            Some("gpu-node-[00001-07650]:8")
        );
        // The list without slots (15 bytes a node) is a string of its own,
        // still written out: its commas count the nodes.
        let noslots = get(big_vars, NOSLOTS_VAR).expect("set");
        assert_eq!(noslots.split(',').count(), 7650);
        assert_eq!(noslots.split(',').nth(41), Some("gpu-node-00042"));
        assert_eq!(big.folded_note(&big_topo), None);
        let file = get(big_vars, HOSTFILE_VAR).expect("a hostfile");
        let text = std::fs::read_to_string(file).expect("readable");
        assert_eq!(text.lines().count(), 7650);
        assert_eq!(text.lines().nth(41), Some("gpu-node-00042 slots=8"));
        // The same list again: the same file.
        assert_eq!(
            get(Lists::new(&big_topo).vars(&big_topo), HOSTFILE_VAR),
            Some(file)
        );
        // 8,669 names fit in FULL_LIMIT; one more and that list is folded too.
        let last_topo = topo(8669);
        let last = Lists::new(&last_topo);
        assert_eq!(
            get(last.vars(&last_topo), NOSLOTS_VAR).map(str::len),
            Some(8669 * 15 - 1)
        );
        assert_eq!(last.folded_note(&last_topo), None);
        let past_topo = topo(8670);
        let past = Lists::new(&past_topo);
        assert_eq!(
            get(past.vars(&past_topo), NOSLOTS_VAR),
            Some("gpu-node-[00001-08670]")
        );
        assert_eq!(
            past.folded_note(&past_topo).as_deref(),
            Some(
                "MULTINODE_HOSTLIST_NOSLOTS is folded (gpu-node-[00001-08670]): written out, \
                 the names of the 8670 nodes would pass Linux's limit of 128 KiB for one \
                 variable; count the nodes with MULTINODE_NNODES (8670), not with the commas \
                 of the list"
            )
        );
    }

    #[test]
    fn in_one_command_line_both_lists_fit_together() {
        let lists = |n: usize| {
            let t = topo(n);
            Lists::new(&t).one_line_vars(&t).to_vec()
        };
        // 17 + 15 bytes a node: 3,840 nodes fit in ONE_LINE_LIMIT together.
        let both = lists(3840);
        assert_eq!(both.len(), 2, "no hostfile on another node");
        assert_eq!(
            get(&both, "MULTINODE_HOSTLIST").map(str::len),
            Some(3840 * 17 - 1)
        );
        let one = lists(3841);
        assert_eq!(
            get(&one, "MULTINODE_HOSTLIST"),
            Some("gpu-node-[00001-03841]:8")
        );
        assert_eq!(
            get(&one, NOSLOTS_VAR).map(|l| l.split(',').count()),
            Some(3841)
        );
        let none = lists(8200);
        assert_eq!(get(&none, NOSLOTS_VAR), Some("gpu-node-[00001-08200]"));
        assert_eq!(none.len(), 2);
    }

    #[test]
    fn a_stale_or_foreign_file_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = topo(3);
        let path = write_hostfile(&t, dir.path()).expect("written");
        std::fs::write(&path, "other\n").expect("spoiled");
        assert_eq!(write_hostfile(&t, dir.path()).expect("rewritten"), path);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "gpu-node-00001 slots=8\ngpu-node-00002 slots=8\ngpu-node-00003 slots=8\n"
        );
    }

    #[test]
    fn an_entry_planted_at_the_final_name_leaves_the_file_at_its_own_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = topo(3);
        let path = write_hostfile(&t, dir.path()).expect("written");
        std::fs::remove_file(&path).expect("removed");
        // A directory there cannot be renamed over, nor used.
        std::fs::create_dir(&path).expect("planted");
        std::fs::write(path.join("x"), "").expect("not empty");
        let kept = write_hostfile(&t, dir.path()).expect("written elsewhere");
        assert_ne!(kept, path);
        assert_eq!(kept.parent(), Some(dir.path()));
        let meta = std::fs::symlink_metadata(&kept).expect("there");
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&kept)
                .expect("read")
                .lines()
                .count(),
            3
        );
        // The temporary names are not predictable: two writes, two names.
        let again = write_hostfile(&t, dir.path()).expect("written elsewhere");
        assert_ne!(again, kept);
    }

    #[test]
    fn without_a_directory_the_command_is_told_and_gets_the_lists() {
        let cache = WireCache::new(Err("No such file or directory".into()));
        let folded = "gpu-node-[00001-09000]:8".to_string();
        for _ in 0..2 {
            let mut env = vec![(FOLDED_VAR.to_string(), folded.clone())];
            let warning = cache.expand_wire(&mut env).expect_err("told");
            assert_eq!(
                warning,
                "cannot write the hostfile of 9000 nodes (no directory for it: No such file \
                 or directory); MULTINODE_HOSTFILE is not set"
            );
            assert_eq!(get(&env, "MULTINODE_HOSTLIST"), Some(folded.as_str()));
            assert_eq!(get(&env, HOSTFILE_VAR), None);
        }
    }

    #[test]
    fn an_agents_directory_is_its_own_and_private() {
        let base = tempfile::tempdir().expect("tempdir");
        let env = crate::topology::machine::fake::env(&[(
            "XDG_RUNTIME_DIR",
            base.path().to_str().expect("UTF-8"),
        )]);
        let (a, b) = (
            private_dir(&env).expect("made"),
            private_dir(&env).expect("made"),
        );
        assert_ne!(a, b);
        for dir in [a, b] {
            assert_eq!(dir.parent(), Some(base.path()));
            let meta = std::fs::symlink_metadata(&dir).expect("there");
            assert!(meta.is_dir());
            assert_eq!(meta.mode() & 0o7777, 0o700);
        }
    }

    #[test]
    fn an_agent_expands_a_folded_list_once_and_again_when_it_changes() {
        let cache = WireCache::new(Ok(std::env::temp_dir()));
        let wire = |folded: &str| vec![(FOLDED_VAR.to_string(), folded.to_string())];
        let mut first = wire("gpu[01-03]:2");
        cache.expand_wire(&mut first).expect("expands");
        let (cached, _) = cache.vars("gpu[01-03]:2".to_string()).expect("cached");
        let mut again = wire("gpu[01-03]:2");
        cache.expand_wire(&mut again).expect("expands");
        assert_eq!(again, first);
        assert!(Arc::ptr_eq(
            &cached,
            &cache.vars("gpu[01-03]:2".to_string()).expect("cached").0
        ));
        let mut other = wire("gpu[01-02]:2");
        cache.expand_wire(&mut other).expect("expands");
        assert_eq!(get(&other, "MULTINODE_HOSTLIST"), Some("gpu01:2,gpu02:2"));
        // A bad list is an error every time, and the last good one stays.
        assert!(cache.expand_wire(&mut wire("gpu[3-1]")).is_err());
        assert!(cache.expand_wire(&mut wire("gpu[3-1]")).is_err());
        let mut back = wire("gpu[01-02]:2");
        cache.expand_wire(&mut back).expect("expands");
        assert_eq!(back, other);
    }

    #[test]
    fn a_cached_hostfile_that_was_removed_is_written_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = WireCache::new(Ok(dir.path().to_path_buf()));
        let folded = Topology::from_hostlist("gpu-node-[00001-09000]:8", "test")
            .expect("parses")
            .hostlist_folded();
        let mut env = vec![(FOLDED_VAR.to_string(), folded.clone())];
        cache.expand_wire(&mut env).expect("expands");
        let file = get(&env, HOSTFILE_VAR).expect("a hostfile").to_string();
        std::fs::remove_file(&file).expect("removed");
        let mut again = vec![(FOLDED_VAR.to_string(), folded)];
        cache.expand_wire(&mut again).expect("expands");
        assert_eq!(get(&again, HOSTFILE_VAR), Some(file.as_str()));
        let text = std::fs::read_to_string(&file).expect("written again");
        assert_eq!(text.lines().count(), 9000);
    }

    #[test]
    fn the_agent_expands_the_wire_form() {
        let mut env = vec![
            ("A".to_string(), "1".to_string()),
            (FOLDED_VAR.to_string(), "gpu[01-03]:2,cpu1:1".to_string()),
            ("MULTINODE_HOSTLIST".to_string(), "stale".to_string()),
            ("B".to_string(), "2".to_string()),
        ];
        expand_wire(&mut env).expect("expands");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["A", "MULTINODE_HOSTLIST", "MULTINODE_HOSTLIST_NOSLOTS", "B"]
        );
        assert_eq!(
            get(&env, "MULTINODE_HOSTLIST"),
            Some("gpu01:2,gpu02:2,gpu03:2,cpu1:1")
        );
        assert_eq!(
            get(&env, "MULTINODE_HOSTLIST_NOSLOTS"),
            Some("gpu01,gpu02,gpu03,cpu1")
        );
        let mut bad = vec![(FOLDED_VAR.to_string(), "gpu[3-1]".to_string())];
        assert!(
            expand_wire(&mut bad)
                .expect_err("reversed")
                .contains("reversed range")
        );
        assert!(bad.is_empty());
        let mut none = vec![("A".to_string(), "1".to_string())];
        expand_wire(&mut none).expect("nothing to do");
        assert_eq!(none.len(), 1);
    }

    /// An `XDG_RUNTIME_DIR` that other users can write to (and is not
    /// sticky) lets them move a private directory away and put their own
    /// in its place: the system's temporary directory is used instead.
    #[test]
    fn a_runtime_dir_others_can_write_to_is_not_used() {
        for (mode, used) in [
            (0o700, true),
            (0o1777, true),
            (0o777, false),
            (0o770, false),
        ] {
            let base = tempfile::tempdir().expect("tempdir");
            std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let env = crate::topology::machine::fake::env(&[(
                "XDG_RUNTIME_DIR",
                base.path().to_str().expect("UTF-8"),
            )]);
            let got = runtime_base(&env);
            assert_eq!(got == base.path(), used, "mode {mode:o}: {}", got.display());
            let dir = private_dir(&env).expect("made");
            assert_eq!(dir.parent() == Some(base.path()), used, "mode {mode:o}");
            std::fs::remove_dir(dir).expect("empty");
        }
    }
}
