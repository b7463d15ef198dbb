//! `--output DIR`: each node's stdout and stderr also go, byte for byte, to
//! `DIR/RANK.out` and `DIR/RANK.err` (srun's `--output=DIR/%t.out`). Every
//! node of the run gets its two files at the start, so a node that printed
//! nothing has empty files. Written by the node's task as its bytes come (a
//! write per chunk, no buffer: what a node printed before a crash is on disk).
//! A file that cannot be written stops being written; the run goes on and
//! says so at the end.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::writer::Stream;

/// The two files of one node.
pub struct NodeFiles {
    out: Option<(PathBuf, File)>,
    err: Option<(PathBuf, File)>,
    /// The first write that failed.
    pub failure: Option<String>,
}

/// Creates `dir` (and its parents) if it is not there.
pub fn prepare(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create the --output directory {}: {e}; give a directory you can write to",
            dir.display()
        )
    })
}

/// `DIR/RANK.out` or `DIR/RANK.err`.
pub fn path(dir: &Path, rank: usize, stream: Stream) -> PathBuf {
    dir.join(match stream {
        Stream::Out => format!("{rank}.out"),
        Stream::Err => format!("{rank}.err"),
    })
}

impl NodeFiles {
    /// Creates (or empties) the node's two files.
    pub fn create(dir: &Path, rank: usize) -> Result<NodeFiles, String> {
        let open = |stream| {
            let path = path(dir, rank, stream);
            File::create(&path)
                .map(|f| (path.clone(), f))
                .map_err(|e| format!("cannot create {}: {e}", path.display()))
        };
        Ok(NodeFiles {
            out: Some(open(Stream::Out)?),
            err: Some(open(Stream::Err)?),
            failure: None,
        })
    }

    pub fn write(&mut self, stream: Stream, data: &[u8]) {
        let slot = match stream {
            Stream::Out => &mut self.out,
            Stream::Err => &mut self.err,
        };
        let Some((path, file)) = slot else { return };
        if let Err(e) = file.write_all(data) {
            if self.failure.is_none() {
                self.failure = Some(format!(
                    "cannot write {}: {e}; the rest of it was not saved",
                    path.display()
                ));
            }
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_goes_to_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("logs/run1");
        prepare(&sub).unwrap();
        let mut files = NodeFiles::create(&sub, 3).unwrap();
        let quiet = NodeFiles::create(&sub, 4).unwrap();
        files.write(Stream::Out, b"a\nparti");
        files.write(Stream::Err, b"oops\n");
        files.write(Stream::Out, b"al\n");
        drop((files, quiet));
        assert_eq!(std::fs::read(sub.join("3.out")).unwrap(), b"a\npartial\n");
        assert_eq!(std::fs::read(sub.join("3.err")).unwrap(), b"oops\n");
        assert_eq!(std::fs::read(sub.join("4.out")).unwrap(), b"");
    }

    #[test]
    fn a_failing_file_is_reported_once_and_left() {
        let mut files = NodeFiles {
            out: Some((
                PathBuf::from("/dev/full"),
                File::create("/dev/full").unwrap(),
            )),
            err: None,
            failure: None,
        };
        files.write(Stream::Out, b"x");
        files.write(Stream::Out, b"y");
        let failure = files.failure.unwrap();
        assert!(failure.starts_with("cannot write /dev/full: "), "{failure}");
        assert!(files.out.is_none());
    }

    #[test]
    fn an_unwritable_directory_is_one_clear_line() {
        let e = prepare(Path::new("/proc/no/such")).unwrap_err();
        assert!(
            e.starts_with("cannot create the --output directory /proc/no/such"),
            "{e}"
        );
    }
}
