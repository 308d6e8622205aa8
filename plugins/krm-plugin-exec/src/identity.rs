//! What identifies an executable's code for the runner's result cache: the SHA-256 of its
//! content, so that a replaced binary is never answered from a cache filled by the old one.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// What changes when a file is replaced or written to: a rename puts a new inode in place,
/// and any write moves the change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Self {
        let nanos =
            |seconds: i64, nanos: i64| i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.size(),
            mtime_ns: nanos(metadata.mtime(), metadata.mtime_nsec()),
            ctime_ns: nanos(metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// The content hashes of the executables called, each read again only when its file changed.
#[derive(Debug, Default)]
pub struct ContentHashes {
    known: Mutex<HashMap<PathBuf, (Stamp, String)>>,
}

/// Executables larger than this are not hashed: their calls are not cached.
const MAX_HASHED_BYTES: u64 = 1 << 30;

impl ContentHashes {
    /// The hex SHA-256 of the file at `path` (symbolic links followed); `None` when it cannot
    /// be read, which leaves the call uncached rather than failing it.
    pub fn of(&self, path: &Path) -> Option<String> {
        let metadata = std::fs::metadata(path).ok()?;
        let stamp = Stamp::of(&metadata);
        if stamp.size > MAX_HASHED_BYTES {
            return None;
        }
        if let Some((known, hash)) = self.lock().get(path)
            && *known == stamp
        {
            return Some(hash.clone());
        }
        let mut file = std::fs::File::open(path).ok()?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0; 64 * 1024];
        loop {
            match file.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => hasher.update(&buffer[..read]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        // Written while being read: the next call hashes it again.
        let after = Stamp::of(&file.metadata().ok()?);
        let hash: String = hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        if after == stamp {
            self.lock().insert(path.to_owned(), (stamp, hash.clone()));
        }
        Some(hash)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (Stamp, String)>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_hashes_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fn");
        std::fs::write(&path, b"one").unwrap();
        let hashes = ContentHashes::default();
        let first = hashes.of(&path).unwrap();
        assert_eq!(hashes.of(&path).as_ref(), Some(&first));
        let replacement = dir.path().join("fn.new");
        std::fs::write(&replacement, b"two").unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        let second = hashes.of(&path).unwrap();
        assert_ne!(first, second);
        assert_eq!(hashes.of(&dir.path().join("missing")), None);
    }
}
