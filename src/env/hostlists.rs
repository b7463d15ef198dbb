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
//!   [`crate::vars::HOSTFILE`] names a file that holds every node on its own line,
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
//! variable ([`crate::vars::HOSTLIST_FOLDED`]), which the agent turns back into the above on
//! its node ([`WireCache::expand_wire`]): the bytes sent to a node do not
//! grow with the node count when the names are regular. So a few bytes can
//! name a million hosts: the agent reckons what a list sent by a client
//! would take written out before expanding it ([`wire_cost`]), and takes
//! at most [`WIRE_NAMES`] names.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use crate::topology::Topology;
use crate::vars;

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
/// The most names an agent expands a [`crate::vars::HOSTLIST_FOLDED`] sent by a client to:
/// five times the largest jobs run today (~12,000 nodes), a fifteenth of
/// what a hostlist of the agent's own environment may hold
/// (`topology`'s 1,000,000).
pub const WIRE_NAMES: u64 = 65_536;

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
                "{} is folded ({}): written out, the names of the {nodes} nodes \
                 would pass Linux's limit of 128 KiB for one variable; count the nodes with \
                 {} ({nodes}), not with the commas of the list",
                vars::HOSTLIST_NOSLOTS,
                crate::topology::shorten(&topo.hostlist_noslots_folded()),
                vars::NNODES,
            )
        })
    }
}

/// The lists of `topo` for `room`; with `MULTINODE_HOSTLIST` folded in a
/// process's environment, a hostfile written in `dir` (or why there is no
/// `dir`), and a warning when it could not be (the variable is then left out).
fn written(topo: &Topology, folded: &str, room: Room, dir: Result<&Path, &str>) -> Written {
    write_out(topo, folded, room, |topo| match dir {
        Ok(dir) => write_hostfile(topo, dir).map_err(|e| format!("in {}: {e}", dir.display())),
        Err(why) => Err(format!("(no directory for it: {why})")),
    })
}

/// [`written`], the hostfile (when one is needed) written by `hostfile`:
/// its path, or why it could not be written.
fn write_out(
    topo: &Topology,
    folded: &str,
    room: Room,
    hostfile: impl FnOnce(&Topology) -> Result<PathBuf, String>,
) -> Written {
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
        vars::HOSTLIST.to_string(),
        if full_fits { full } else { folded.to_string() },
    ));
    vars.push((
        vars::HOSTLIST_NOSLOTS.to_string(),
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
        match hostfile(topo) {
            Ok(path) => vars.push((
                vars::HOSTFILE.to_string(),
                path.to_string_lossy().into_owned(),
            )),
            Err(e) => {
                hostfile_warning = Some(format!(
                    "cannot write the hostfile of {} nodes {e}; {} is not set",
                    topo.nodes.len(),
                    vars::HOSTFILE,
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

/// Every variable name this module may set, the wire's included (the
/// first four of [`vars::CONTRACT`]).
pub(crate) const NAMES: [&str; 4] = [
    vars::HOSTLIST,
    vars::HOSTLIST_NOSLOTS,
    vars::HOSTFILE,
    vars::HOSTLIST_FOLDED,
];

/// [`WireCache::expand_wire`] without a cache, writing in the system's
/// temporary directory as [`Lists::vars`] does (the same file).
#[cfg(test)]
pub(crate) fn expand_wire(env: &mut Vec<(String, String)>) -> Result<(), String> {
    let Some(at) = env.iter().position(|(k, _)| k == vars::HOSTLIST_FOLDED) else {
        return Ok(());
    };
    let (_, folded) = env.remove(at);
    let topo = Topology::from_hostlist(&folded, vars::HOSTLIST_FOLDED)
        .map_err(|e| format!("{}: {e}", vars::HOSTLIST_FOLDED))?;
    let temp = std::env::temp_dir();
    let rendered = written(&topo, &folded, Room::EachVariable, Ok(&temp));
    put_lists(env, at, &rendered.vars);
    rendered.hostfile_warning.map_or(Ok(()), Err)
}

/// Puts the lists' variables at `at` in `env`, in place of any it had.
fn put_lists(env: &mut Vec<(String, String)>, at: usize, vars: &[(String, String)]) {
    env.retain(|(k, _)| !NAMES.contains(&k.as_str()));
    let at = at.min(env.len());
    env.splice(at..at, vars.iter().cloned());
}

/// What the lists of a request's [`crate::vars::HOSTLIST_FOLDED`] take written out, in bytes
/// at most (both lists, and the hostfile's lines, ~8 bytes longer a name),
/// reckoned from the folded text without expanding it; 0 without the
/// variable. An error, which says so, past [`WIRE_NAMES`] names.
pub(crate) fn wire_cost(env: &[(String, String)]) -> Result<usize, String> {
    let Some((_, folded)) = env.iter().find(|(k, _)| k == vars::HOSTLIST_FOLDED) else {
        return Ok(0);
    };
    let (names, list) = expansion_bound(folded);
    if names > WIRE_NAMES {
        return Err(format!(
            "{} sent with this command names up to {names} hosts, more than \
             {WIRE_NAMES} names",
            vars::HOSTLIST_FOLDED
        ));
    }
    let bytes = list
        .saturating_mul(3)
        .saturating_add(names.saturating_mul(8));
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// How many names a hostlist expands to, and the length of the list
/// written out (`name:N,` each), at most: the product of its bracket
/// groups' sizes an element, each group as wide as its widest number. Read
/// as `topology` reads a list, but without checking it (the parser does).
fn expansion_bound(list: &str) -> (u64, u64) {
    let (mut names, mut bytes) = (0u64, 0u64);
    let mut depth = 0usize;
    let mut element_start = 0;
    let mut add = |element: &str| {
        let (mut count, mut len) = (1u64, 0u64);
        let mut rest = element;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').map_or(rest.len(), |c| open + c);
            let (n, width) = group_bound(&rest[open + 1..close]);
            count = count.saturating_mul(n);
            len = len.saturating_add(open as u64).saturating_add(width);
            rest = rest.get(close + 1..).unwrap_or("");
        }
        len = len.saturating_add(rest.len() as u64);
        names = names.saturating_add(count);
        // `:N` (`:1` where the element has none) and the comma.
        bytes = bytes.saturating_add(count.saturating_mul(len.saturating_add(3)));
    };
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                add(&list[element_start..i]);
                element_start = i + 1;
            }
            _ => {}
        }
    }
    add(&list[element_start..]);
    (names, bytes)
}

/// A bracket group's count of values and its widest value: `01-04,7` is 5
/// and 2 (a number is written with its range start's width, or its own);
/// anything else (an IPv6 literal) is one value, written with its brackets.
fn group_bound(group: &str) -> (u64, u64) {
    let (mut count, mut width) = (0u64, 0u64);
    for item in group.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let n = match (lo.parse::<u64>(), hi.parse::<u64>()) {
            (Ok(l), Ok(h)) if digits(lo) && digits(hi) && l <= h => {
                width = width.max(lo.len().max(hi.len()) as u64);
                (h - l).saturating_add(1)
            }
            _ => {
                width = width.max(item.len() as u64 + 2);
                1
            }
        };
        count = count.saturating_add(n);
    }
    (count.max(1), width)
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

/// An agent's expansions of [`crate::vars::HOSTLIST_FOLDED`]. The last one is kept: every
/// command of a job sends the same folded list, and expanding it (parsing,
/// writing out both lists) was ~5% of an agent's CPU a command at 100
/// nodes. Each has a hostfile of its own (past [`FULL_LIMIT`]), removed
/// once neither the cache nor a running command holds it: a list no command
/// uses any more leaves nothing behind.
#[derive(Debug)]
pub(crate) struct WireCache {
    /// The folded list expanded last, and what it gave.
    last: std::sync::Mutex<Option<(String, Wire)>>,
    /// Where hostfiles are written ([`private_dir`]), or why there is no such place.
    dir: Result<PathBuf, String>,
}

/// A folded list written out, shared by the commands that got it; its
/// hostfile stays as long as one of them (or the cache) holds it.
pub(crate) type Wire = Arc<Expanded>;

/// The variables of one expansion, and the hostfile they name (if any).
#[derive(Debug)]
pub(crate) struct Expanded {
    vars: Vec<(String, String)>,
    /// Held, not read: removed when the last holder lets go.
    _hostfile: Option<OwnFile>,
}

/// A file of the agent's own, removed when dropped.
#[derive(Debug)]
struct OwnFile(PathBuf);

impl Drop for OwnFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

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

    /// Replaces [`crate::vars::HOSTLIST_FOLDED`] in a request's variables by the lists as
    /// [`Lists::new`] writes them; the command holds what it returns until
    /// it ended (its hostfile stays until then). Returns a message for the
    /// command when the value is not a hostlist, or names more than
    /// [`WIRE_NAMES`] hosts (the variable is then dropped), or its hostfile
    /// cannot be written (the lists are set, [`crate::vars::HOSTFILE`] is not). From
    /// the cache when `env` holds the folded list expanded last (and, past
    /// [`FULL_LIMIT`], its hostfile is still there).
    pub(crate) fn expand_wire(
        &self,
        env: &mut Vec<(String, String)>,
    ) -> Result<Option<Wire>, String> {
        let Some(at) = env.iter().position(|(k, _)| k == vars::HOSTLIST_FOLDED) else {
            return Ok(None);
        };
        let (_, folded) = env.remove(at);
        let (wire, warning) = self.expand(folded)?;
        put_lists(env, at, &wire.vars);
        warning.map_or(Ok(Some(wire)), Err)
    }

    /// The lists of `folded`, and a warning when its hostfile could not be
    /// written (such lists are not kept: the next command tries again).
    /// Expanded and written out without holding the cache: a command with
    /// another list does not wait for this one.
    fn expand(&self, folded: String) -> Result<(Wire, Option<String>), String> {
        if let Some(wire) = self.cached(&folded) {
            return Ok((wire, None));
        }
        let (names, _) = expansion_bound(&folded);
        if names > WIRE_NAMES {
            return Err(format!(
                "{} names up to {names} hosts, more than {WIRE_NAMES}",
                vars::HOSTLIST_FOLDED
            ));
        }
        let topo = Topology::from_hostlist(&folded, vars::HOSTLIST_FOLDED)
            .map_err(|e| format!("{}: {e}", vars::HOSTLIST_FOLDED))?;
        let lists = Lists::new(&topo);
        let mut file = None;
        let rendered = write_out(&topo, &lists.folded, Room::EachVariable, |topo| {
            let dir = self
                .dir
                .as_deref()
                .map_err(|why| format!("(no directory for it: {why})"))?;
            let path =
                write_own_hostfile(topo, dir).map_err(|e| format!("in {}: {e}", dir.display()))?;
            file = Some(OwnFile(path.clone()));
            Ok(path)
        });
        let wire = Arc::new(Expanded {
            vars: rendered.vars,
            _hostfile: file,
        });
        let warning = rendered.hostfile_warning;
        if warning.is_none() {
            let replaced = self
                .last
                .lock()
                .expect("not poisoned: no panics while held")
                .replace((folded, wire.clone()));
            // Its hostfile goes now, unless a running command holds it.
            drop(replaced);
        }
        Ok((wire, warning))
    }

    /// Whether [`WireCache::expand_wire`] has nothing to do for `env`, or
    /// answers from the cache: no parsing nor writing, a runtime's thread
    /// may call it.
    pub(crate) fn expands_at_once(&self, env: &[(String, String)]) -> bool {
        env.iter()
            .find(|(k, _)| k == vars::HOSTLIST_FOLDED)
            .is_none_or(|(_, folded)| self.cached(folded).is_some())
    }

    /// The lists of `folded` if it is the list expanded last and its
    /// hostfile (if any) is still there.
    fn cached(&self, folded: &str) -> Option<Wire> {
        let last = self
            .last
            .lock()
            .expect("not poisoned: no panics while held");
        let (seen, wire) = last.as_ref()?;
        let fresh = seen == folded
            && wire
                .vars
                .iter()
                .all(|(k, v)| k != vars::HOSTFILE || Path::new(v).is_file());
        fresh.then(|| wire.clone())
    }
}

/// Writes `host slots=N` lines for every node into `dir`, under a name made
/// of this user's id and a digest of the content, and returns its path. A
/// file of that name already there is used when it is this user's and holds
/// the same text. Otherwise a new file (mode 0600, an unpredictable name,
/// never through a link) takes that name; where it cannot (another user's
/// entry in a shared directory), it keeps its own name: something planted
/// at either name never leaves the job without a hostfile. A file kept so
/// before, still this user's and the same, is used again: each run would
/// otherwise leave one more.
fn write_hostfile(topo: &Topology, dir: &Path) -> std::io::Result<PathBuf> {
    let (name, text) = hostfile_text(topo);
    let uid = nix::unistd::geteuid().as_raw();
    let path = dir.join(&name);
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.uid() == uid
        && std::fs::read(&path).is_ok_and(|old| old == text.as_bytes())
    {
        return Ok(path);
    }
    if let Some(kept) = kept_before(dir, &name, &text, uid) {
        return Ok(kept);
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

/// A file an earlier [`write_hostfile`] kept under its own name
/// (`NAME.XXXXXX`, something planted at `NAME`): a regular file of `uid`'s,
/// private, holding `text`.
fn kept_before(dir: &Path, name: &str, text: &str, uid: u32) -> Option<PathBuf> {
    let prefix = format!("{name}.");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        entry.file_name().to_str()?.strip_prefix(&prefix)?;
        // The entry's own metadata: a link is not followed.
        let meta = entry.metadata().ok()?;
        let ours = meta.is_file()
            && meta.uid() == uid
            && meta.mode() & 0o077 == 0
            && meta.len() == text.len() as u64;
        (ours && std::fs::read(entry.path()).ok()? == text.as_bytes()).then(|| entry.path())
    })
}

/// The hostfile of `topo` (`host slots=N` lines), and its name: this
/// user's id and a digest of the text.
fn hostfile_text(topo: &Topology) -> (String, String) {
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
    (format!("multinode-hosts-{uid}-{hex}"), text)
}

/// Writes the hostfile of `topo` into an agent's own directory, as a file
/// of one expansion's own (mode 0600, its name [`hostfile_text`]'s and a
/// random end): removed with it, whatever other expansions wrote.
fn write_own_hostfile(topo: &Topology, dir: &Path) -> std::io::Result<PathBuf> {
    let (name, text) = hostfile_text(topo);
    let mut file = tempfile::Builder::new()
        .prefix(&format!("{name}."))
        .tempfile_in(dir)?;
    file.write_all(text.as_bytes())?;
    let (_, path) = file.keep().map_err(|e| e.error)?;
    Ok(path)
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
        assert_eq!(get(small_vars, vars::HOSTFILE), None);
        assert_eq!(small.folded, "gpu-node-[00001-07649]:8");
        let big = Lists::new(&big_topo);
        let big_vars = big.vars(&big_topo);
        assert_eq!(
            get(big_vars, "MULTINODE_HOSTLIST"),
            Some("gpu-node-[00001-07650]:8")
        );
        // The list without slots (15 bytes a node) is a string of its own,
        // still written out: its commas count the nodes.
        let noslots = get(big_vars, vars::HOSTLIST_NOSLOTS).expect("set");
        assert_eq!(noslots.split(',').count(), 7650);
        assert_eq!(noslots.split(',').nth(41), Some("gpu-node-00042"));
        assert_eq!(big.folded_note(&big_topo), None);
        let file = get(big_vars, vars::HOSTFILE).expect("a hostfile");
        let text = std::fs::read_to_string(file).expect("readable");
        assert_eq!(text.lines().count(), 7650);
        assert_eq!(text.lines().nth(41), Some("gpu-node-00042 slots=8"));
        // The same list again: the same file.
        assert_eq!(
            get(Lists::new(&big_topo).vars(&big_topo), vars::HOSTFILE),
            Some(file)
        );
        // 8,669 names fit in FULL_LIMIT; one more and that list is folded too.
        let last_topo = topo(8669);
        let last = Lists::new(&last_topo);
        assert_eq!(
            get(last.vars(&last_topo), vars::HOSTLIST_NOSLOTS).map(str::len),
            Some(8669 * 15 - 1)
        );
        assert_eq!(last.folded_note(&last_topo), None);
        let past_topo = topo(8670);
        let past = Lists::new(&past_topo);
        assert_eq!(
            get(past.vars(&past_topo), vars::HOSTLIST_NOSLOTS),
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
            get(&one, vars::HOSTLIST_NOSLOTS).map(|l| l.split(',').count()),
            Some(3841)
        );
        let none = lists(8200);
        assert_eq!(
            get(&none, vars::HOSTLIST_NOSLOTS),
            Some("gpu-node-[00001-08200]")
        );
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
        // Runs do not pile up files: the one kept is used again while it
        // is the same, and another is written for another list.
        for _ in 0..3 {
            assert_eq!(write_hostfile(&t, dir.path()).expect("again"), kept);
        }
        let other = write_hostfile(&topo(4), dir.path()).expect("another list");
        assert_ne!(other, kept);
        let planted_prefix = format!("{}.", path.file_name().unwrap().to_str().unwrap());
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_str().unwrap().starts_with(&planted_prefix))
            .count();
        assert_eq!(files, 1, "one file kept beside the planted entry");
    }

    #[test]
    fn without_a_directory_the_command_is_told_and_gets_the_lists() {
        let cache = WireCache::new(Err("No such file or directory".into()));
        let folded = "gpu-node-[00001-09000]:8".to_string();
        for _ in 0..2 {
            let mut env = vec![(vars::HOSTLIST_FOLDED.to_string(), folded.clone())];
            let warning = cache.expand_wire(&mut env).expect_err("told");
            assert_eq!(
                warning,
                "cannot write the hostfile of 9000 nodes (no directory for it: No such file \
                 or directory); MULTINODE_HOSTFILE is not set"
            );
            assert_eq!(get(&env, "MULTINODE_HOSTLIST"), Some(folded.as_str()));
            assert_eq!(get(&env, vars::HOSTFILE), None);
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

    #[test]
    fn an_agent_expands_a_folded_list_once_and_again_when_it_changes() {
        let cache = WireCache::new(Ok(std::env::temp_dir()));
        let wire = |folded: &str| vec![(vars::HOSTLIST_FOLDED.to_string(), folded.to_string())];
        let mut first = wire("gpu[01-03]:2");
        cache.expand_wire(&mut first).expect("expands");
        let (cached, _) = cache.expand("gpu[01-03]:2".to_string()).expect("cached");
        let mut again = wire("gpu[01-03]:2");
        cache.expand_wire(&mut again).expect("expands");
        assert_eq!(again, first);
        assert!(Arc::ptr_eq(
            &cached,
            &cache.expand("gpu[01-03]:2".to_string()).expect("cached").0
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
        let mut env = vec![(vars::HOSTLIST_FOLDED.to_string(), folded.clone())];
        let held = cache.expand_wire(&mut env).expect("expands");
        let file = get(&env, vars::HOSTFILE).expect("a hostfile").to_string();
        std::fs::remove_file(&file).expect("removed");
        drop(held);
        let mut again = vec![(vars::HOSTLIST_FOLDED.to_string(), folded)];
        let _held = cache.expand_wire(&mut again).expect("expands");
        let file = get(&again, vars::HOSTFILE).expect("a hostfile");
        let text = std::fs::read_to_string(file).expect("written again");
        assert_eq!(text.lines().count(), 9000);
    }

    #[test]
    fn the_agent_expands_the_wire_form() {
        let mut env = vec![
            ("A".to_string(), "1".to_string()),
            (
                vars::HOSTLIST_FOLDED.to_string(),
                "gpu[01-03]:2,cpu1:1".to_string(),
            ),
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
        let mut bad = vec![(vars::HOSTLIST_FOLDED.to_string(), "gpu[3-1]".to_string())];
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

    #[test]
    fn a_hostfile_goes_once_no_command_and_not_the_cache_holds_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = WireCache::new(Ok(dir.path().to_path_buf()));
        let expand = |list: &str| {
            let mut env = vec![(vars::HOSTLIST_FOLDED.to_string(), list.to_string())];
            let held = cache
                .expand_wire(&mut env)
                .expect("expands")
                .expect("a list");
            let file = PathBuf::from(get(&env, vars::HOSTFILE).expect("a hostfile"));
            (held, file)
        };
        let (running, first) = expand("a-[00001-20000]:8");
        let (second_held, second) = expand("b-[00001-20000]:8");
        assert!(first.is_file(), "a running command holds it");
        drop(running);
        assert!(!first.is_file(), "neither a command nor the cache holds it");
        drop(second_held);
        assert!(second.is_file(), "the cache holds the last list's");
        let (_, third) = expand("c-[00001-20000]:8");
        assert!(!second.is_file());
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("read").collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(third.is_file());
    }

    #[test]
    fn a_folded_list_is_reckoned_before_it_is_expanded() {
        let wire = |list: &str| vec![(vars::HOSTLIST_FOLDED.to_string(), list.to_string())];
        assert_eq!(wire_cost(&[]), Ok(0));
        for (list, names, bytes) in [
            ("gpu01:8", 1, 10),
            ("gpu[01-04]:8,cpu1", 5, 4 * 10 + 7),
            ("rack[1-2]-node[01-10,15]:4", 22, 22 * 17),
            ("[fe80::1]:2,n[8-11]", 5, 14 + 4 * 6),
        ] {
            assert_eq!(expansion_bound(list), (names, bytes), "{list}");
            let topo = Topology::from_hostlist(list, "test").expect("parses");
            assert!(topo.nodes.len() as u64 <= names, "{list}");
            assert!(topo.hostlist().len() as u64 <= bytes, "{list}");
            assert_eq!(wire_cost(&wire(list)), Ok((3 * bytes + 8 * names) as usize));
        }
        let attack = format!("{}[000001-999999]:8", "h".repeat(240));
        let refused = wire_cost(&wire(&attack)).expect_err("too many");
        assert!(
            refused.contains("999999 hosts, more than 65536 names"),
            "{refused}"
        );
        let cache = WireCache::new(Ok(std::env::temp_dir()));
        assert!(cache.expand_wire(&mut wire(&attack)).is_err());
        let product = "a[0-999]b[0-999]c[0-999]d[0-999]e[0-999]f[0-999]g[0-999]";
        assert_eq!(
            expansion_bound(product).0,
            u64::MAX,
            "saturated, not wrapped"
        );
    }
}
