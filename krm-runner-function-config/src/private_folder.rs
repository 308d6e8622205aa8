//! Folders whose files the runner trusts as its own earlier output: the wasm evaluator's
//! compiled modules (run as machine code) and the result cache's answers (given to callers as
//! a function's). Such a folder must belong to the runner's user and be writable by no one
//! else, so that no other user can plant a file in it.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why a folder cannot be trusted; every variant names it.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("cannot create folder {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read folder {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("folder {} is not a folder", path.display())]
    NotAFolder { path: PathBuf },
    #[error("folder {} belongs to uid {owner}, not to the runner's uid {user}", path.display())]
    Owner {
        path: PathBuf,
        owner: u32,
        user: u32,
    },
    #[error("folder {} is writable by others (mode {mode:o})", path.display())]
    Writable { path: PathBuf, mode: u32 },
}

/// Creates `dir` (mode 0700) unless it exists, then checks that it belongs to the runner's user
/// and that no one else can write it.
pub fn private_folder(dir: &Path) -> Result<(), FolderError> {
    let path = || dir.to_owned();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| FolderError::Create {
            path: path(),
            source,
        })?;
    let metadata = std::fs::metadata(dir).map_err(|source| FolderError::Read {
        path: path(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(FolderError::NotAFolder { path: path() });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = unsafe { libc::geteuid() };
    if metadata.uid() != user {
        return Err(FolderError::Owner {
            path: path(),
            owner: metadata.uid(),
            user,
        });
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(FolderError::Writable {
            path: path(),
            mode: metadata.mode() & 0o7777,
        });
    }
    Ok(())
}

/// `bytes` as lowercase hexadecimal, as digests are named in files.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_folder_others_may_write_is_refused_and_a_missing_one_is_made_private() {
        let scratch = tempfile::tempdir().unwrap();
        let made = scratch.path().join("a/b");
        private_folder(&made).unwrap();
        let mode = std::fs::metadata(&made).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = private_folder(&made).unwrap_err();
        assert!(
            matches!(refused, FolderError::Writable { mode: 0o777, .. }),
            "{refused}"
        );
        let file = scratch.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(private_folder(&file).is_err());
    }

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
    }
}
