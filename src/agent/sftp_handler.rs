//! One `sftp` session's requests mapped to file operations (russh-sftp's
//! `Handler`): its handles (files and directories, each holding a place
//! among the agent's), file operations off the async threads within the
//! agent's bounds, OpenSSH's extensions (`posix-rename`, `hardlink`,
//! `fsync`, `limits`).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use russh_sftp::extensions::{self, FsyncExtension, HardlinkExtension, LimitsExtension};
use russh_sftp::protocol::{
    Attrs, Data, ExtendedReply, File as Entry, FileAttributes, Handle, Name, OpenFlags, Packet,
    Status, StatusCode, Version,
};
use russh_sftp::server::StatusReply;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::sftp_bounds::MAX_HANDLES;
use super::sftp_fs::{
    Listing, attributes, io_error, next_entries, ok, open_file, real_path, set_attributes,
};
use super::shared::Shared;

/// As OpenSSH's sftp-server: packets up to 256 KiB, reads and writes up to
/// 255 KiB (clients use this size when the server states it).
const MAX_PACKET: u64 = 256 * 1024;
const MAX_IO: u32 = 255 * 1024;
/// `posix-rename@openssh.com`: rename that replaces the target.
const POSIX_RENAME: &str = "posix-rename@openssh.com";
/// Open files and directories of one session, by handle.
pub(super) struct Files {
    open: HashMap<String, Held>,
    next: u64,
    shared: Arc<Shared>,
    /// Cancelled when the channel ends.
    ended: CancellationToken,
}

/// An open handle, and its place among the agent's handles.
struct Held {
    open: OpenHandle,
    _slot: OwnedSemaphorePermit,
}

enum OpenHandle {
    File(Arc<File>),
    Dir(PathBuf, Arc<Mutex<Listing>>),
}

type Reply<T> = Result<T, StatusReply>;

impl Files {
    pub(super) fn new(shared: Arc<Shared>, ended: CancellationToken) -> Self {
        Files {
            open: HashMap::new(),
            next: 0,
            shared,
            ended,
        }
    }

    /// Runs a blocking file operation off the async threads, one of at most
    /// [`IO_AT_ONCE`](super::sftp_bounds::IO_AT_ONCE); given up (the thread
    /// finishes it alone) when the channel ends.
    async fn io<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Reply<T> {
        let gone = || StatusCode::Failure.with_message("the session ended");
        let io = self.shared.sftp.io.clone();
        let run = async move {
            let Ok(slot) = io.acquire_owned().await else {
                return Err(gone());
            };
            match tokio::task::spawn_blocking(move || {
                let _slot = slot;
                f()
            })
            .await
            {
                Ok(result) => result.map_err(io_error),
                Err(_) => Err(StatusCode::Failure.with_message("the file operation failed")),
            }
        };
        tokio::select! {
            reply = run => reply,
            () = self.ended.cancelled() => Err(gone()),
        }
    }

    /// A slot for one more handle, before opening anything: past this
    /// session's bound or the agent's, a failure that says which.
    fn slot(&self) -> Reply<OwnedSemaphorePermit> {
        if self.open.len() >= MAX_HANDLES {
            return Err(StatusCode::Failure.with_message(format!(
                "too many open handles: {MAX_HANDLES} in this session, the limit; close some first"
            )));
        }
        let bounds = &self.shared.sftp;
        bounds.handles.clone().try_acquire_owned().map_err(|_| {
            StatusCode::Failure.with_message(format!(
                "too many open handles: {} in all SFTP sessions of this agent, the limit; \
                 close some first",
                bounds.handles_max
            ))
        })
    }

    fn insert(&mut self, open: OpenHandle, slot: OwnedSemaphorePermit) -> String {
        self.next += 1;
        let handle = self.next.to_string();
        self.open.insert(handle.clone(), Held { open, _slot: slot });
        handle
    }

    fn get(&self, handle: &str) -> Option<&OpenHandle> {
        self.open.get(handle).map(|held| &held.open)
    }

    fn file(&self, handle: &str) -> Reply<Arc<File>> {
        match self.get(handle) {
            Some(OpenHandle::File(f)) => Ok(f.clone()),
            _ => Err(StatusCode::Failure.with_message("no such open file")),
        }
    }
}

impl Drop for Files {
    /// The session's end: its files close, and what it allocated goes back.
    fn drop(&mut self) {
        self.open.clear();
        super::heap::trim_heap();
    }
}

impl russh_sftp::server::Handler for Files {
    type Error = StatusReply;

    fn unimplemented(&self) -> Self::Error {
        StatusCode::OpUnsupported.into()
    }

    async fn init(&mut self, version: u32, _extensions: HashMap<String, String>) -> Reply<Version> {
        debug!(version, "sftp client");
        let mut v = Version::new();
        for ext in [
            POSIX_RENAME,
            extensions::FSYNC,
            extensions::HARDLINK,
            extensions::LIMITS,
        ] {
            v.extensions.insert(ext.into(), "1".into());
        }
        Ok(v)
    }

    async fn open(
        &mut self,
        id: u32,
        filename: String,
        pflags: OpenFlags,
        attrs: FileAttributes,
    ) -> Reply<Handle> {
        let slot = self.slot()?;
        let mode = attrs.permissions.unwrap_or(0o666) & 0o7777;
        let file = self.io(move || open_file(&filename, pflags, mode)).await?;
        let handle = self.insert(OpenHandle::File(Arc::new(file)), slot);
        Ok(Handle { id, handle })
    }

    async fn close(&mut self, id: u32, handle: String) -> Reply<Status> {
        match self.open.remove(&handle) {
            Some(_) => Ok(ok(id)),
            None => Err(StatusCode::Failure.with_message("no such handle")),
        }
    }

    async fn read(&mut self, id: u32, handle: String, offset: u64, len: u32) -> Reply<Data> {
        let file = self.file(&handle)?;
        let len = len.min(MAX_IO) as usize;
        let data = self
            .io(move || {
                let mut buf = vec![0u8; len];
                let n = file.read_at(&mut buf, offset)?;
                buf.truncate(n);
                Ok(buf)
            })
            .await?;
        if data.is_empty() && len > 0 {
            return Err(StatusCode::Eof.into());
        }
        Ok(Data { id, data })
    }

    async fn write(
        &mut self,
        id: u32,
        handle: String,
        offset: u64,
        data: Vec<u8>,
    ) -> Reply<Status> {
        let file = self.file(&handle)?;
        self.io(move || file.write_all_at(&data, offset)).await?;
        Ok(ok(id))
    }

    async fn lstat(&mut self, id: u32, path: String) -> Reply<Attrs> {
        let meta = self.io(move || fs::symlink_metadata(path)).await?;
        Ok(Attrs {
            id,
            attrs: attributes(&meta),
        })
    }

    async fn stat(&mut self, id: u32, path: String) -> Reply<Attrs> {
        let meta = self.io(move || fs::metadata(path)).await?;
        Ok(Attrs {
            id,
            attrs: attributes(&meta),
        })
    }

    async fn fstat(&mut self, id: u32, handle: String) -> Reply<Attrs> {
        let meta = match self.get(&handle) {
            Some(OpenHandle::File(f)) => {
                let f = f.clone();
                self.io(move || f.metadata()).await?
            }
            Some(OpenHandle::Dir(path, _)) => {
                let path = path.clone();
                self.io(move || fs::metadata(path)).await?
            }
            None => return Err(StatusCode::Failure.with_message("no such handle")),
        };
        Ok(Attrs {
            id,
            attrs: attributes(&meta),
        })
    }

    async fn setstat(&mut self, id: u32, path: String, attrs: FileAttributes) -> Reply<Status> {
        self.io(move || set_attributes(Path::new(&path), None, &attrs))
            .await?;
        Ok(ok(id))
    }

    async fn fsetstat(&mut self, id: u32, handle: String, attrs: FileAttributes) -> Reply<Status> {
        let file = self.file(&handle)?;
        self.io(move || set_attributes(Path::new(""), Some(&file), &attrs))
            .await?;
        Ok(ok(id))
    }

    async fn opendir(&mut self, id: u32, path: String) -> Reply<Handle> {
        let slot = self.slot()?;
        let dir = PathBuf::from(&path);
        let entries = self.io(move || fs::read_dir(path)).await?;
        let listing = Listing { dots: 0, entries };
        let handle = self.insert(OpenHandle::Dir(dir, Arc::new(Mutex::new(listing))), slot);
        Ok(Handle { id, handle })
    }

    async fn readdir(&mut self, id: u32, handle: String) -> Reply<Name> {
        let Some(OpenHandle::Dir(dir, listing)) = self.get(&handle) else {
            return Err(StatusCode::Failure.with_message("no such open directory"));
        };
        let (dir, listing) = (dir.clone(), listing.clone());
        let files = self
            .io(move || {
                let mut listing = listing.lock().unwrap_or_else(|e| e.into_inner());
                next_entries(&dir, &mut listing)
            })
            .await?;
        if files.is_empty() {
            return Err(StatusCode::Eof.into());
        }
        Ok(Name { id, files })
    }

    async fn remove(&mut self, id: u32, filename: String) -> Reply<Status> {
        self.io(move || fs::remove_file(filename)).await?;
        Ok(ok(id))
    }

    async fn mkdir(&mut self, id: u32, path: String, attrs: FileAttributes) -> Reply<Status> {
        let mode = attrs.permissions.unwrap_or(0o777) & 0o7777;
        self.io(move || fs::DirBuilder::new().mode(mode).create(path))
            .await?;
        Ok(ok(id))
    }

    async fn rmdir(&mut self, id: u32, path: String) -> Reply<Status> {
        self.io(move || fs::remove_dir(path)).await?;
        Ok(ok(id))
    }

    async fn realpath(&mut self, id: u32, path: String) -> Reply<Name> {
        let real = self.io(move || real_path(&path)).await?;
        Ok(Name {
            id,
            files: vec![Entry::dummy(real)],
        })
    }

    async fn rename(&mut self, id: u32, oldpath: String, newpath: String) -> Reply<Status> {
        // SFTP v3's rename does not replace an existing target (OpenSSH's
        // sftp-server neither); `posix-rename@openssh.com` does.
        self.io(move || {
            if fs::symlink_metadata(&newpath).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{newpath} exists"),
                ));
            }
            fs::rename(oldpath, newpath)
        })
        .await?;
        Ok(ok(id))
    }

    async fn readlink(&mut self, id: u32, path: String) -> Reply<Name> {
        let target = self
            .io(move || {
                fs::read_link(path)?
                    .into_os_string()
                    .into_string()
                    .map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidData, "the link's target is not UTF-8")
                    })
            })
            .await?;
        Ok(Name {
            id,
            files: vec![Entry::dummy(target)],
        })
    }

    async fn symlink(&mut self, id: u32, linkpath: String, targetpath: String) -> Reply<Status> {
        // OpenSSH sends the two paths in the opposite order to the draft
        // (target first, then the link's path), and every client follows it:
        // the crate's `linkpath` is the target.
        let (target, link) = (linkpath, targetpath);
        self.io(move || std::os::unix::fs::symlink(target, link))
            .await?;
        Ok(ok(id))
    }

    async fn extended(&mut self, id: u32, request: String, data: Vec<u8>) -> Reply<Packet> {
        let mut data = Bytes::from(data);
        let bad = |_| StatusReply::from(StatusCode::BadMessage);
        match request.as_str() {
            POSIX_RENAME => {
                // The same two paths as a hard link's.
                let paths: HardlinkExtension =
                    russh_sftp::de::from_bytes(&mut data).map_err(bad)?;
                self.io(move || fs::rename(paths.oldpath, paths.newpath))
                    .await?;
                Ok(ok(id).into())
            }
            extensions::HARDLINK => {
                let link: HardlinkExtension = russh_sftp::de::from_bytes(&mut data).map_err(bad)?;
                self.io(move || fs::hard_link(link.oldpath, link.newpath))
                    .await?;
                Ok(ok(id).into())
            }
            extensions::FSYNC => {
                let sync: FsyncExtension = russh_sftp::de::from_bytes(&mut data).map_err(bad)?;
                let file = self.file(&sync.handle)?;
                self.io(move || file.sync_all()).await?;
                Ok(ok(id).into())
            }
            extensions::LIMITS => {
                let limits = LimitsExtension {
                    max_packet_len: MAX_PACKET,
                    max_read_len: MAX_IO.into(),
                    max_write_len: MAX_IO.into(),
                    max_open_handles: MAX_HANDLES as u64,
                };
                let data = russh_sftp::ser::to_bytes(&limits)
                    .map_err(|_| StatusReply::from(StatusCode::Failure))?
                    .to_vec();
                Ok(ExtendedReply { id, data }.into())
            }
            _ => Err(StatusCode::OpUnsupported.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_path_allows_a_missing_last_component() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let missing = base.join("new-file");
        assert_eq!(
            real_path(missing.to_str().unwrap()).unwrap(),
            missing.to_str().unwrap()
        );
        let dotted = format!("{}/./x/..", base.display());
        assert_eq!(real_path(&dotted).ok(), None, "x does not exist");
        std::fs::create_dir(base.join("x")).unwrap();
        assert_eq!(real_path(&dotted).unwrap(), base.to_str().unwrap());
    }

    #[test]
    fn attributes_keep_the_file_type() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink("target", &link).unwrap();
        let attrs = attributes(&fs::symlink_metadata(&link).unwrap());
        assert!(attrs.is_symlink() && !attrs.is_dir());
        let attrs = attributes(&fs::metadata(dir.path()).unwrap());
        assert!(attrs.is_dir());
    }
}
