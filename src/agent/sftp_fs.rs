//! The file-system side of the `sftp` subsystem ([`super::sftp`]): SFTP's
//! flags, attributes and statuses mapped to file operations; files opened
//! without blocking and FIFOs refused; a directory read a page at a time.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use russh_sftp::protocol::{File as Entry, FileAttributes, OpenFlags, Status, StatusCode};
use russh_sftp::server::StatusReply;

/// Directory entries per READDIR answer.
pub(super) const ENTRIES_PER_ANSWER: usize = 128;

/// A directory being read: `.` and `..`, then its entries as READDIR asks.
pub(super) struct Listing {
    pub(super) dots: u8,
    pub(super) entries: fs::ReadDir,
}

pub(super) fn io_error(e: io::Error) -> StatusReply {
    let code = match e.kind() {
        io::ErrorKind::NotFound => StatusCode::NoSuchFile,
        io::ErrorKind::PermissionDenied => StatusCode::PermissionDenied,
        io::ErrorKind::Unsupported => StatusCode::OpUnsupported,
        _ => StatusCode::Failure,
    };
    code.with_message(e.to_string())
}

pub(super) fn ok(id: u32) -> Status {
    Status {
        id,
        status_code: StatusCode::Ok,
        error_message: "Success".into(),
        language_tag: "en-US".into(),
    }
}

/// Opens a file as OPEN asks, without ever blocking: a FIFO is refused (it
/// would wait for a peer, and SFTP reads and writes at offsets, which a pipe
/// has not); O_NONBLOCK stays on other special files (a device that has no
/// data answers at once), and is cleared for a regular file.
pub(super) fn open_file(path: &str, pflags: OpenFlags, mode: u32) -> io::Result<File> {
    let not_a_pipe = |path: &str| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{path} is a FIFO or a socket: SFTP reads and writes regular files and devices"
            ),
        )
    };
    // Looked at first, so that opening a FIFO does not wake a writer
    // waiting on it; checked again on the open file (it may have changed).
    if fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket()) {
        return Err(not_a_pipe(path));
    }
    let mut o = OpenOptions::new();
    o.read(pflags.contains(OpenFlags::READ))
        .write(pflags.contains(OpenFlags::WRITE))
        .append(pflags.contains(OpenFlags::APPEND))
        .truncate(pflags.contains(OpenFlags::TRUNCATE))
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .mode(mode);
    if pflags.contains(OpenFlags::EXCLUDE) {
        o.create_new(true);
    } else if pflags.contains(OpenFlags::CREATE) {
        o.create(true);
    }
    let file = o.open(path).map_err(|e| match e.raw_os_error() {
        // A FIFO opened for writing with no reader, or a socket.
        Some(libc::ENXIO) => not_a_pipe(path),
        _ => e,
    })?;
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        return Err(not_a_pipe(path));
    }
    if kind.is_file() {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let flags = OFlag::from_bits_retain(fcntl(&file, FcntlArg::F_GETFL)?);
        fcntl(&file, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    }
    Ok(file)
}

/// The attributes SFTP carries, from a file's metadata (type bits included).
pub(super) fn attributes(meta: &fs::Metadata) -> FileAttributes {
    FileAttributes {
        size: Some(meta.len()),
        uid: Some(meta.uid()),
        gid: Some(meta.gid()),
        permissions: Some(meta.mode()),
        atime: Some(meta.atime().clamp(0, u32::MAX as i64) as u32),
        mtime: Some(meta.mtime().clamp(0, u32::MAX as i64) as u32),
        ..Default::default()
    }
}

/// Applies SETSTAT/FSETSTAT attributes: size, owner, mode, times.
pub(super) fn set_attributes(
    path: &Path,
    file: Option<&File>,
    attrs: &FileAttributes,
) -> io::Result<()> {
    if let Some(size) = attrs.size {
        match file {
            Some(f) => f.set_len(size)?,
            None => OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(path)?
                .set_len(size)?,
        }
    }
    if attrs.uid.is_some() || attrs.gid.is_some() {
        match file {
            Some(f) => std::os::unix::fs::fchown(f, attrs.uid, attrs.gid)?,
            None => std::os::unix::fs::chown(path, attrs.uid, attrs.gid)?,
        }
    }
    if let Some(mode) = attrs.permissions {
        let perms = fs::Permissions::from_mode(mode & 0o7777);
        match file {
            Some(f) => f.set_permissions(perms)?,
            None => fs::set_permissions(path, perms)?,
        }
    }
    if let (Some(atime), Some(mtime)) = (attrs.atime, attrs.mtime) {
        let at = |secs: u32| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.into());
        let times = fs::FileTimes::new()
            .set_accessed(at(atime))
            .set_modified(at(mtime));
        match file {
            Some(f) => f.set_times(times)?,
            None => File::options()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?
                .set_times(times)?,
        }
    }
    Ok(())
}

/// The absolute form of `path`, resolved like realpath(3), where the last
/// component need not exist (as OpenSSH's sftp-server allows).
pub(super) fn real_path(path: &str) -> io::Result<String> {
    let path = if path.is_empty() { "." } else { path };
    let resolved = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let p = Path::new(path);
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                return Err(e);
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            fs::canonicalize(parent)?.join(name)
        }
        Err(e) => return Err(e),
    };
    resolved.into_os_string().into_string().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the path is not UTF-8 (SFTP names here must be)",
        )
    })
}

/// A directory entry with `ls -l`'s line (sftp's `ls -l` shows it): the
/// crate's, with the file type as `ls` writes it.
pub(super) fn entry(name: String, attrs: FileAttributes) -> Entry {
    let mut e = Entry::new(name, attrs);
    let kind = match e.attrs.permissions.unwrap_or(0) & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFIFO => 'p',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFSOCK => 's',
        _ => '-',
    };
    e.longname.replace_range(..1, &kind.to_string());
    e
}

/// Up to [`ENTRIES_PER_ANSWER`] entries of a directory being read, with
/// their attributes: fewer only at its end.
pub(super) fn next_entries(dir: &Path, listing: &mut Listing) -> io::Result<Vec<Entry>> {
    let mut files = Vec::new();
    while listing.dots < 2 && files.len() < ENTRIES_PER_ANSWER {
        let name = if listing.dots == 0 { "." } else { ".." };
        listing.dots += 1;
        files.push(entry(
            name.into(),
            attributes(&fs::symlink_metadata(dir.join(name))?),
        ));
    }
    while files.len() < ENTRIES_PER_ANSWER {
        let Some(next) = listing.entries.next() else {
            break;
        };
        let e = next?;
        // A name that is not UTF-8 cannot be said in this protocol, and an
        // entry removed meanwhile has nothing to show: both left out.
        let (Ok(name), Ok(meta)) = (e.file_name().into_string(), e.metadata()) else {
            continue;
        };
        files.push(entry(name, attributes(&meta)));
    }
    Ok(files)
}
