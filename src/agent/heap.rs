//! Memory a burst freed, given back to the system.

/// Gives the memory freed by a large request back to the system: glibc
/// keeps freed small blocks in its heaps, so a burst of a few MiB (an SFTP
/// session's listings, an environment) would stay in the agent's RSS.
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases the allocator's free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
