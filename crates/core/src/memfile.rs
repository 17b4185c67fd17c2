//! Large response bodies held in files the kernel sends from with `sendfile`
//! (the HTTP runner's file route) instead of copying them through the process for every request.
//!
//! Where the body goes, first that works:
//!
//! 1. an unnamed file in a given directory (`O_TMPFILE`: never linked, gone when the last
//!    holder closes it). Its pages sit in the page cache, as the file nginx serves for
//!    mastersrv does: counted in no resident set, evictable under memory pressure (written
//!    back first if the file lived past the writeback delay), and on filesystems with large
//!    folios (ext4, xfs) sent with a fraction of the per-page work of shared memory;
//! 2. an anonymous memory file (`memfd_create`): shared memory (`Shmem` in `/proc/meminfo`),
//!    also outside the resident set, but never evicted, only swapped;
//! 3. the heap, served as any other body.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

/// Bytes [`MemFile::write_to`] reads from the file at a time.
const WRITE_CHUNK: usize = 256 * 1024;

/// Bytes [`MemFile::written_in`] gathers before each write to the file.
const FILL_BUFFER: usize = 256 * 1024;

/// An immutable body: a file (unnamed, or a memory file), or bytes in memory.
#[derive(Debug, Clone)]
pub enum MemFile {
    /// In a file (read from offset 0; never written after [`MemFile::new_in`]).
    File {
        /// The file.
        file: Arc<std::fs::File>,
        /// Its length.
        len: u64,
    },
    /// In memory (no file could be made).
    Heap(Bytes),
}

impl MemFile {
    /// `bytes` in a new memory file named `name` (shown in `/proc/PID/fd`), or kept in memory
    /// when one cannot be made.
    #[must_use]
    pub fn new(name: &str, bytes: Vec<u8>) -> Self {
        Self::new_in(None, name, bytes)
    }

    /// `bytes` in a new unnamed file in `dir`, else in a memory file named `name`, else kept
    /// in memory (see the module docs). A file that cannot be filled (a full disk) counts as
    /// one that cannot be made.
    #[must_use]
    pub fn new_in(dir: Option<&Path>, name: &str, bytes: Vec<u8>) -> Self {
        Self::written_in(dir, name, |out| out.write_all(&bytes))
    }

    /// The body `fill` writes, streamed into a new unnamed file in `dir`, else into a memory
    /// file named `name`, else into memory (see the module docs): the body is never held in
    /// the heap whole while a file can take it. `fill` runs again for each place tried, so it
    /// must write the same bytes each time; a file it cannot fill (a full disk) counts as one
    /// that cannot be made. Only an error of `fill` itself while writing to memory leaves the
    /// body empty (logged).
    #[must_use]
    pub fn written_in(
        dir: Option<&Path>,
        name: &str,
        mut fill: impl FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Self {
        let mut into = |fd: io::Result<OwnedFd>| -> io::Result<Self> {
            let mut out = io::BufWriter::with_capacity(FILL_BUFFER, std::fs::File::from(fd?));
            fill(&mut out)?;
            let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            let len = file.metadata()?.len();
            Ok(Self::File {
                file: Arc::new(file),
                len,
            })
        };
        let unnamed = dir.map(|d| {
            into(unnamed(d)).inspect_err(|e| {
                tracing::debug!(dir = %d.display(), error = %e, "no unnamed file there");
            })
        });
        match unnamed
            .and_then(Result::ok)
            .map_or_else(|| into(memfd(name)), Ok)
        {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!(error = %e, "no memory file; the body stays in memory");
                let mut bytes = Vec::new();
                if let Err(e) = fill(&mut bytes) {
                    tracing::warn!(body = name, error = %e, "the body could not be made");
                    bytes = Vec::new();
                }
                bytes.shrink_to_fit();
                Self::Heap(Bytes::from(bytes))
            }
        }
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

/// A new unnamed file (`O_TMPFILE`) in `dir`, open for reading and writing.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn unnamed(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, open};
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    Ok(open(dir, flags, Mode::RUSR | Mode::WUSR)?)
}

/// A new unnamed file in `dir`: not on this system.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn unnamed(_dir: &Path) -> io::Result<OwnedFd> {
    Err(io::ErrorKind::Unsupported.into())
}

/// A new anonymous memory file named `name` (shown in `/proc/PID/fd`).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) fn memfd(name: &str) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, memfd_create};
    Ok(memfd_create(name, MemfdFlags::CLOEXEC)?)
}

/// A new anonymous memory file: not on this system.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(crate) fn memfd(_name: &str) -> io::Result<OwnedFd> {
    Err(io::ErrorKind::Unsupported.into())
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

    fn fd_target(file: &std::fs::File) -> String {
        use std::os::fd::AsRawFd as _;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
        link.to_string_lossy().into_owned()
    }

    #[test]
    fn unnamed_file_in_the_directory_leaves_no_entry() {
        let dir = crate::testdir::TempDir::new("memfile");
        std::fs::create_dir_all(&dir.0).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
        let m = MemFile::new_in(Some(&dir.0), "test", data.clone());
        let MemFile::File { file, len } = &m else {
            panic!("O_TMPFILE works in the system's temp dir");
        };
        assert_eq!(*len, data.len() as u64);
        assert_eq!(m.bytes().unwrap(), data);
        // Never linked: nothing in the directory, and the kernel names it as deleted.
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
        let target = fd_target(file);
        assert!(target.starts_with(&*dir.0.to_string_lossy()), "{target}");
        assert!(target.ends_with("(deleted)"), "{target}");
    }

    #[test]
    fn a_written_body_is_streamed_into_the_first_place_that_takes_it() {
        let dir = crate::testdir::TempDir::new("memfile-written");
        std::fs::create_dir_all(&dir.0).unwrap();
        let data: Vec<u8> = (0..(FILL_BUFFER * 3 + 11) as u32)
            .map(|i| (i % 241) as u8)
            .collect();
        let fill = |w: &mut dyn Write| {
            // Small writes, as a document writer makes them.
            data.chunks(1000).try_for_each(|c| w.write_all(c))
        };
        let m = MemFile::written_in(Some(&dir.0), "written", fill);
        let MemFile::File { file, len } = &m else {
            panic!("O_TMPFILE works in the system's temp dir");
        };
        assert_eq!(*len, data.len() as u64);
        assert!(m.bytes().unwrap() == data);
        assert!(fd_target(file).ends_with("(deleted)"));
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
        // No such directory: a memory file, filled again from the start.
        let missing = dir.0.join("missing");
        let m = MemFile::written_in(Some(&missing), "written", fill);
        let MemFile::File { file, .. } = &m else {
            panic!("memfd_create works on Linux");
        };
        assert!(fd_target(file).starts_with("/memfd:written"));
        assert!(m.bytes().unwrap() == data);
        assert!(MemFile::written_in(None, "empty", |_| Ok(())).is_empty());
    }

    #[test]
    fn a_missing_directory_falls_back_to_a_memory_file() {
        let dir = crate::testdir::TempDir::new("memfile-missing");
        let m = MemFile::new_in(Some(&dir.0), "fallback", b"abc".to_vec());
        let MemFile::File { file, .. } = &m else {
            panic!("memfd_create works on Linux");
        };
        assert!(fd_target(file).starts_with("/memfd:fallback"));
        assert_eq!(m.bytes().unwrap(), &b"abc"[..]);
    }
}
