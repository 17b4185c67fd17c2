//! Large response bodies held in anonymous memory files (`memfd_create`), so that the HTTP
//! server sends them with `sendfile` ([`super::http::FileRoute`]) instead of copying them
//! through the process for every request. Where the system has no memory files the bytes stay
//! in the heap and are served as any other body.
//!
//! The pages of a memory file belong to the kernel's shared memory (`Shmem` in
//! `/proc/meminfo`), not to the process's resident set: the same place a file served by nginx
//! sits (the page cache), except that they cannot be evicted to disk.

use std::io::{self, Write};
use std::sync::Arc;

use bytes::Bytes;

/// Bytes [`MemFile::write_to`] reads from the file at a time.
const WRITE_CHUNK: usize = 256 * 1024;

/// An immutable body: a memory file, or bytes in memory.
#[derive(Debug, Clone)]
pub enum MemFile {
    /// In a memory file (read from offset 0; never written after [`MemFile::new`]).
    File {
        /// The file.
        file: Arc<std::fs::File>,
        /// Its length.
        len: u64,
    },
    /// In memory (no memory files here).
    Heap(Bytes),
}

impl MemFile {
    /// `bytes` in a new memory file named `name` (shown in `/proc/PID/fd`), or kept in memory
    /// when one cannot be made.
    #[must_use]
    pub fn new(name: &str, bytes: Vec<u8>) -> Self {
        match Self::file(name, &bytes) {
            Ok(file) => Self::File {
                file: Arc::new(file),
                len: bytes.len() as u64,
            },
            Err(e) => {
                tracing::debug!(error = %e, "no memory file; the body stays in memory");
                Self::Heap(Bytes::from(bytes))
            }
        }
    }

    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    fn file(name: &str, bytes: &[u8]) -> io::Result<std::fs::File> {
        use rustix::fs::{MemfdFlags, memfd_create};
        let fd = memfd_create(name, MemfdFlags::CLOEXEC)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        Ok(file)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    fn file(_name: &str, _bytes: &[u8]) -> io::Result<std::fs::File> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The body's length.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::File { len, .. } => *len,
            Self::Heap(b) => b.len() as u64,
        }
    }

    /// Whether the body is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, read back from the file (a copy; for the rare request that cannot be sent
    /// from the file) or shared from memory.
    pub fn bytes(&self) -> io::Result<Bytes> {
        match self {
            Self::Heap(b) => Ok(b.clone()),
            Self::File { len, .. } => {
                let mut out = Vec::with_capacity(usize::try_from(*len).map_err(io::Error::other)?);
                self.write_to(&mut out)?;
                Ok(Bytes::from(out))
            }
        }
    }

    /// Writes the body to `out` a chunk at a time (no copy of the whole body in memory), with
    /// positional reads: the file's offset, shared by every holder, is never moved.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let (file, len) = match self {
            Self::Heap(b) => return out.write_all(b),
            Self::File { file, len } => (file, *len),
        };
        let mut chunk = vec![0; WRITE_CHUNK];
        let mut at = 0u64;
        while at < len {
            let n = usize::try_from(len - at).map_or(WRITE_CHUNK, |left| left.min(WRITE_CHUNK));
            let part = chunk.get_mut(..n).unwrap_or_default();
            file.read_exact_at(part, at)?;
            out.write_all(part)?;
            at += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_bytes() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let m = MemFile::new("test", data.clone());
        assert_eq!(m.len(), data.len() as u64);
        assert!(
            matches!(m, MemFile::File { .. }),
            "memfd_create works on Linux"
        );
        assert_eq!(m.bytes().unwrap(), data);
        let mut out = Vec::new();
        m.write_to(&mut out).unwrap();
        assert_eq!(out, data);
        let big: Vec<u8> = (0..WRITE_CHUNK * 2 + 7).map(|i| (i % 253) as u8).collect();
        let mut out = Vec::new();
        MemFile::new("big", big.clone()).write_to(&mut out).unwrap();
        assert!(out == big, "several chunks, the last one short");
        assert!(MemFile::new("empty", Vec::new()).is_empty());
    }
}
