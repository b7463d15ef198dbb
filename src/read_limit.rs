//! Reading input whose size the user does not control (a file that is
//! `/dev/zero`, an endless pipe) with a limit: at most `limit + 1` bytes are
//! ever read, so memory stays bounded whatever the input is.

use std::io::{self, Read};
use std::path::Path;

/// Reads `reader` to its end, or fails with [`io::ErrorKind::FileTooLarge`]
/// as soon as it holds more than `limit` bytes.
pub(crate) fn read_at_most(reader: impl Read, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it is larger than {}, the limit", human(limit)),
        ));
    }
    Ok(bytes)
}

/// [`read_at_most`] of a file.
pub(crate) fn read_file_at_most(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_at_most(std::fs::File::open(path)?, limit)
}

/// [`read_file_at_most`] of a UTF-8 text file.
pub(crate) fn read_text_at_most(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_file_at_most(path, limit)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "it is not UTF-8 text (a binary file?)",
        )
    })
}

/// `64 KiB`, `16 MiB`, `100 bytes`: a limit as a person reads it.
pub(crate) fn human(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_input_stops_at_the_limit() {
        let err = read_file_at_most(Path::new("/dev/zero"), 4096).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(err.to_string(), "it is larger than 4 KiB, the limit");
        let err = read_at_most(io::repeat(b'x'), 100).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
    }

    #[test]
    fn inputs_up_to_the_limit_are_read_whole() {
        assert_eq!(read_at_most(&b"abc"[..], 3).unwrap(), b"abc");
        assert!(read_at_most(&b"abcd"[..], 3).is_err());
        assert_eq!(read_at_most(&b""[..], 0).unwrap(), b"");
    }

    #[test]
    fn binary_text_is_refused_after_a_bounded_read() {
        let err = read_text_at_most(Path::new("/dev/urandom"), 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin");
        std::fs::write(&path, [0xff, 0xfe, b'a']).unwrap();
        let err = read_text_at_most(&path, 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn limits_read_as_a_person_writes_them() {
        assert_eq!(human(64 * 1024), "64 KiB");
        assert_eq!(human(16 * 1024 * 1024), "16 MiB");
        assert_eq!(human(100), "100 bytes");
        assert_eq!(human(1500), "1500 bytes");
    }
}
